// Parameters of every matvec/matmul kernel (mirrors MatmulParams in src/gpu/matmul.rs).
struct MatmulParams {
    rows: u32,         // rows of this weight chunk
    cols: u32,         // row length (input features)
    n_tokens: u32,     // tokens in the batch
    row_offset: u32,   // first output row of this chunk
    y_stride: u32,     // output row length: y[t * y_stride + row]
    x_stride: u32,     // input row length: x[t * x_stride + col]
    weight_scale: f32, // per-tensor scale (I2_S, TQ*: the model's), else 1
    split: u32,        // paired kernels: the first weight's rows (else 0)
}
