// The position of the first token of the batch being processed (mirrors PositionParams in
// src/gpu/ops/mod.rs). One small uniform shared by every RoPE and attention op of a forward
// pass, so moving to the next token is a single 16-byte write.
struct PositionParams {
    pos0: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}
