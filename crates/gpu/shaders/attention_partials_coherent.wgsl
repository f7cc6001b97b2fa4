// attention.wgsl's binding 7 for main_decode (Kernel::AttentionDecode), whose workgroups hand
// their pieces to the last one of their head within the dispatch: `@coherent` (wgpu's native
// `wgpu-memory-decoration-coherent`, SPIR-V's Coherent), so that those reads see the other
// workgroups' writes rather than a multiprocessor's cached copy. Layout as
// attention_partials.wgsl's.
@group(0) @binding(7) @coherent var<storage, read_write> partials: array<vec4<f32>>;
