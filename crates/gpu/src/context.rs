//! Device creation: natively through Vulkan, Metal or DX12 (never a silent fall back to GL), in
//! the browser through WebGPU, or from a device the caller already has.

use super::error::GpuError;
use super::kernels::PipelineKey;

/// What the device can do that our kernels care about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct GpuFeatures {
    /// `shader-f16`: f16 arithmetic and storage in WGSL.
    pub shader_f16: bool,
    /// Subgroup operations (`subgroupAdd`, ...).
    pub subgroups: bool,
    /// Timestamp queries (for `tritium bench`).
    pub timestamps: bool,
    /// Smallest and largest subgroup size the adapter reports (0 when unknown).
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    /// Subgroup-scope cooperative matrices of 16x16x16 with f16 inputs and f32 accumulation
    /// (wgpu's experimental `wgpu-cooperative-matrix`; natively, on Vulkan tensor cores):
    /// the prefill matmuls use them ([`crate::kernels::Kernel::MatmulF16`]).
    pub cooperative_matrix: bool,
    /// The `@coherent` decoration on storage buffers (wgpu's native
    /// `wgpu-memory-decoration-coherent`; Vulkan): the one-token attention that hands its
    /// pieces between workgroups of one dispatch reads them through it
    /// ([`crate::ops::AttentionOp::combines_in_attend`]).
    pub coherent: bool,
}

/// Kernel choices a caller narrows (a model's runtime hints, `runtimeOptimizations`): each
/// switch only takes a kernel out of the choice the device offers, never adds one it lacks
/// (a kernel still needs its [`GpuFeatures`]). Every kernel left computes the same values up
/// to its own rounding (the self-tests' bounds), so narrowing never breaks a result. Set it
/// before the first pipeline or op is built: ops built before keep their kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct KernelPolicy {
    /// Products of several tokens may take the cooperative-matrix kernel (f16 operands,
    /// [`crate::kernels::Kernel::MatmulF16`]); off, the dequantizing tiled kernel with f32
    /// operands.
    pub coop_products: bool,
    /// A prefill's attention may take the cooperative-matrix kernel
    /// ([`crate::kernels::Kernel::AttentionCoop`]).
    pub coop_attention: bool,
    /// A prefill's attention may take the kernel by KV head
    /// ([`crate::kernels::Kernel::AttentionGroup`]).
    pub grouped_attention: bool,
    /// The RMSNorm kernels may reduce through subgroup operations (off: through workgroup
    /// memory, as on a device without subgroups).
    pub norm_subgroups: bool,
    /// The plain RMSNorm kernel's workgroup size (`None`: its own; a power of two from 1 to
    /// 256, which its reductions need, checked by whoever sets it).
    pub rms_norm_workgroup: Option<u32>,
}

impl Default for KernelPolicy {
    /// Every kernel the device can run.
    fn default() -> Self {
        KernelPolicy {
            coop_products: true,
            coop_attention: true,
            grouped_attention: true,
            norm_subgroups: true,
            rms_norm_workgroup: None,
        }
    }
}

/// The limits that shape how we lay out buffers and dispatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct GpuLimits {
    pub max_storage_buffer_binding_size: u64,
    pub max_buffer_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub min_storage_buffer_offset_alignment: u32,
    pub min_uniform_buffer_offset_alignment: u32,
}

/// A summary of the adapter, for `diagnose()` and benchmark reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub features: GpuFeatures,
    pub limits: GpuLimits,
}

impl AdapterSummary {
    /// SwiftShader: by name, or a browser's CPU adapter without a name (Chromium's, which
    /// hides it).
    pub fn is_swiftshader(&self) -> bool {
        let browser_cpu =
            self.device_type == "Cpu" && self.backend == "BrowserWebGpu" && self.name.is_empty();
        self.name.to_ascii_lowercase().contains("swiftshader") || browser_cpu
    }
}

/// What to ask of the device.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// Use `shader-f16` when the adapter has it.
    pub allow_f16: bool,
    /// Use subgroup operations when the adapter has them.
    pub allow_subgroups: bool,
    /// Ask for timestamp queries when the adapter has them (benchmarks).
    pub allow_timestamps: bool,
    /// Use cooperative matrices (see [`GpuFeatures::cooperative_matrix`]) when the adapter
    /// has them, with `shader-f16`.
    pub allow_cooperative_matrix: bool,
    pub power_preference: wgpu::PowerPreference,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            allow_f16: true,
            allow_subgroups: true,
            allow_timestamps: true,
            allow_cooperative_matrix: true,
            power_preference: wgpu::PowerPreference::HighPerformance,
        }
    }
}

/// A device and queue with what we learned about them.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: AdapterSummary,
    pub features: GpuFeatures,
    pub limits: GpuLimits,
    /// Kernels the caller keeps out of the choice ([`KernelPolicy`]; all allowed by default).
    pub policy: KernelPolicy,
    pub(crate) pipelines: PipelineCache,
    /// Frees what was made through this context ([`GpuContext::release`]).
    releaser: Releaser,
    /// Set by the device-lost callback: why the device was lost.
    lost: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Uniforms, scratch and readback buffers, reused (src/pool.rs).
    pub(crate) pool: std::sync::Arc<super::BufferPool>,
    /// The f16 operands of the cooperative-matrix matmul, shared by every product
    /// ([`CoopScratch`]).
    pub(crate) coop_scratch: std::sync::Mutex<Option<CoopScratch>>,
}

/// Frees the GPU memory of everything made through one [`GpuContext`], also after the
/// context itself is gone (a load that fails half-way): a device we made is destroyed with
/// all its buffers; on the caller's device (a page's own `GPUDevice`) each buffer made
/// through the context is destroyed and the device keeps working.
#[derive(Clone)]
pub struct Releaser {
    device: wgpu::Device,
    /// The device belongs to the caller.
    external: bool,
    /// On an external device: every buffer made through the context.
    made: std::sync::Arc<std::sync::Mutex<Vec<wgpu::Buffer>>>,
}

impl Releaser {
    /// Free it all now (WebGPU frees a dropped buffer only when the garbage collector gets
    /// to it). Nothing made through the context may be used afterwards.
    pub fn release(&self) {
        if self.external {
            if let Ok(mut made) = self.made.lock() {
                for b in made.drain(..) {
                    b.destroy();
                }
            }
        } else {
            self.device.destroy();
        }
    }
}

/// The backends we accept: never GL (no f16, no subgroups, and a sign of a broken setup).
fn allowed_backends() -> wgpu::Backends {
    if cfg!(target_arch = "wasm32") {
        wgpu::Backends::BROWSER_WEBGPU
    } else {
        let from_env = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
        (from_env & (wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12))
            .union(wgpu::Backends::empty())
    }
}

/// Set to `0` to keep cooperative matrices off natively whatever [`DeviceOptions`] say (an
/// operator's switch, should a driver misbehave; `tritium selftest` checks the kernels).
pub const COOPERATIVE_MATRIX_ENV: &str = "TRITIUM_COOPERATIVE_MATRIX";

/// Whether the environment allows cooperative matrices (see [`COOPERATIVE_MATRIX_ENV`]).
fn cooperative_matrix_allowed(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_none_or(|v| v != "0")
}

impl GpuContext {
    /// Create a device on the best adapter. Natively this is Vulkan, Metal or DX12 (the
    /// `WGPU_BACKEND` variable may narrow the choice); in the browser, WebGPU.
    pub async fn new(options: &DeviceOptions) -> Result<Self, GpuError> {
        let backends = allowed_backends();
        if backends.is_empty() {
            return Err(GpuError::NoAdapter(
                "WGPU_BACKEND names no backend we use (vulkan, metal, dx12)".into(),
            ));
        }
        Self::on_instance(&Self::instance(backends), options).await
    }

    /// The wgpu instance for `backends`.
    pub fn instance(backends: wgpu::Backends) -> wgpu::Instance {
        wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            flags: wgpu::InstanceFlags::from_build_config().with_env(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        })
    }

    /// A device on the best adapter of `instance`.
    pub async fn on_instance(
        instance: &wgpu::Instance,
        options: &DeviceOptions,
    ) -> Result<Self, GpuError> {
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: options.power_preference,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| {
                GpuError::NoAdapter(format!(
                    "{e} (backends tried: {:?}; natively install a Vulkan driver, for example \
                     mesa-vulkan-drivers; in a browser, WebGPU must be enabled)",
                    allowed_backends()
                ))
            })?;
        Self::from_adapter(&adapter, options).await
    }

    /// Create a device on a given adapter, asking for its real limits and the optional
    /// features we use.
    pub async fn from_adapter(
        adapter: &wgpu::Adapter,
        options: &DeviceOptions,
    ) -> Result<Self, GpuError> {
        let available = adapter.features();
        let mut wanted = wgpu::Features::empty();
        if options.allow_f16 {
            wanted |= wgpu::Features::SHADER_F16;
        }
        if options.allow_subgroups {
            wanted |= wgpu::Features::SUBGROUP;
        }
        if options.allow_timestamps {
            wanted |= wgpu::Features::TIMESTAMP_QUERY;
            if !cfg!(target_arch = "wasm32") {
                wanted |= wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS;
            }
        }
        let env = if cfg!(target_arch = "wasm32") {
            None
        } else {
            std::env::var_os(COOPERATIVE_MATRIX_ENV)
        };
        let coop = options.allow_cooperative_matrix
            && cooperative_matrix_allowed(env.as_deref())
            && options.allow_f16
            && available.contains(wgpu::Features::SHADER_F16)
            && has_f16_coop_16(adapter);
        let mut experimental_features = wgpu::ExperimentalFeatures::disabled();
        if coop {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: wgpu asks callers of its experimental features to accept that they may
            // have bugs. Only the prefill matmul kernels use cooperative matrices, in the one
            // configuration the adapter reports (has_f16_coop_16); `tritium selftest` checks
            // them against the CPU on a device that has them, and
            // `allow_cooperative_matrix: false` keeps them off.
            experimental_features = unsafe { wgpu::ExperimentalFeatures::enabled() };
        }
        if !cfg!(target_arch = "wasm32") {
            wanted |= wgpu::Features::MEMORY_DECORATION_COHERENT;
        }
        let required_features = wanted & available;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("tritium"),
                required_features,
                required_limits: adapter.limits(),
                experimental_features,
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::RequestDevice(e.to_string()))?;
        Ok(Self::from_device(&adapter.get_info(), device, queue))
    }

    /// Wrap a device the caller created (for example a page's own `GPUDevice`).
    pub fn from_device(info: &wgpu::AdapterInfo, device: wgpu::Device, queue: wgpu::Queue) -> Self {
        let f = device.features();
        let features = GpuFeatures {
            shader_f16: f.contains(wgpu::Features::SHADER_F16),
            subgroups: f.contains(wgpu::Features::SUBGROUP),
            timestamps: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            subgroup_min_size: info.subgroup_min_size,
            subgroup_max_size: info.subgroup_max_size,
            cooperative_matrix: f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
                && f.contains(wgpu::Features::SHADER_F16),
            coherent: f.contains(wgpu::Features::MEMORY_DECORATION_COHERENT),
        };
        let l = device.limits();
        let limits = GpuLimits {
            max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
            max_buffer_size: l.max_buffer_size,
            max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
            max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
            max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            min_uniform_buffer_offset_alignment: l.min_uniform_buffer_offset_alignment,
        };
        let adapter = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            features,
            limits,
        };
        let lost = std::sync::Arc::new(std::sync::Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut l) = flag.lock() {
                *l = Some(format!("{reason:?}: {message}"));
            }
        });
        GpuContext {
            releaser: Releaser {
                device: device.clone(),
                external: false,
                made: Default::default(),
            },
            device,
            queue,
            adapter,
            features,
            limits,
            policy: KernelPolicy::default(),
            pipelines: PipelineCache::default(),
            lost,
            pool: Default::default(),
            coop_scratch: Default::default(),
        }
    }

    /// This context's device belongs to the caller: [`GpuContext::release`] frees the buffers
    /// made through the context and leaves the device to its owner.
    pub fn into_external(mut self) -> Self {
        self.releaser.external = true;
        self
    }

    /// Whether the device belongs to the caller.
    pub fn is_external(&self) -> bool {
        self.releaser.external
    }

    /// Keep `buffer` for [`GpuContext::release`] (on an external device; a device we own frees
    /// every buffer when it is destroyed).
    pub fn keep(&self, buffer: &wgpu::Buffer) {
        if self.releaser.external {
            if let Ok(mut made) = self.releaser.made.lock() {
                made.push(buffer.clone());
            }
        }
    }

    /// Free the GPU memory of everything made through this context now ([`Releaser`]).
    pub fn release(&self) {
        self.pool.trim();
        self.releaser.release();
    }

    /// What frees this context's GPU memory, for when the context may be gone by then.
    pub fn releaser(&self) -> Releaser {
        self.releaser.clone()
    }

    /// Why the device was lost (`None` while it works): a driver reset, the GPU process
    /// crashing, memory pressure, or the owner destroying it.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }

    /// Whether the adapter runs on the CPU (SwiftShader, lavapipe/llvmpipe, a browser's
    /// fallback adapter). Such drivers pay per invocation of a workgroup (each one's state is
    /// kept and switched at every barrier), so kernels there take the smallest workgroups
    /// their layout allows; real GPUs keep the tuned sizes.
    pub fn is_software(&self) -> bool {
        let name = self.adapter.name.to_ascii_lowercase();
        self.adapter.device_type == "Cpu"
            || ["swiftshader", "llvmpipe", "lavapipe"]
                .iter()
                .any(|s| name.contains(s))
    }

    /// Whether one-token products should take the integer-dot kernels (int8 activations)
    /// rather than the f32 ones: everywhere except on SwiftShader, whose JIT makes
    /// `dot4I8Packed` and the extra quantization dispatches so slow that the f32 matvecs decode
    /// more than twice as fast there; on GPUs and on lavapipe the integer-dot path is faster.
    pub fn int_dot_decode(&self) -> bool {
        !self.adapter.is_swiftshader()
    }

    /// The largest storage binding we may use: the device's binding limit, capped by its
    /// buffer size limit, rounded down to a multiple of 256 bytes.
    pub fn max_binding_bytes(&self) -> u64 {
        let b = self
            .limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size);
        b & !255
    }
}

/// Whether the adapter offers subgroup-scope 16x16x16 cooperative matrices with f16 inputs and
/// f32 accumulation (the one configuration the MatmulF16 kernel uses).
fn has_f16_coop_16(adapter: &wgpu::Adapter) -> bool {
    if !adapter
        .features()
        .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
    {
        return false;
    }
    adapter.cooperative_matrix_properties().iter().any(|p| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
            && p.ab_type == wgpu::CooperativeScalarType::F16
            && p.cr_type == wgpu::CooperativeScalarType::F32
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cooperative_matrices_are_switched_off_by_zero_only() {
        use std::ffi::OsStr;
        assert!(cooperative_matrix_allowed(None));
        assert!(cooperative_matrix_allowed(Some(OsStr::new("1"))));
        assert!(!cooperative_matrix_allowed(Some(OsStr::new("0"))));
    }

    fn adapter(name: &str, backend: &str, device_type: &str) -> AdapterSummary {
        AdapterSummary {
            name: name.into(),
            backend: backend.into(),
            device_type: device_type.into(),
            driver: String::new(),
            features: GpuFeatures::default(),
            limits: GpuLimits::default(),
        }
    }

    #[test]
    fn swiftshader_is_recognized_natively_and_in_the_browser() {
        assert!(adapter("SwiftShader Device (Subzero)", "Vulkan", "Cpu").is_swiftshader());
        assert!(adapter("", "BrowserWebGpu", "Cpu").is_swiftshader());
        assert!(!adapter("llvmpipe (LLVM 15.0.6, 256 bits)", "Vulkan", "Cpu").is_swiftshader());
        assert!(!adapter("NVIDIA H200", "Vulkan", "DiscreteGpu").is_swiftshader());
        assert!(!adapter("", "BrowserWebGpu", "DiscreteGpu").is_swiftshader());
    }
}

/// Compiled pipelines, created on first use.
#[derive(Default)]
pub struct PipelineCache {
    pub(crate) pipelines: std::sync::Mutex<
        std::collections::HashMap<PipelineKey, std::sync::Arc<wgpu::ComputePipeline>>,
    >,
}

/// The f16 operands of [`Kernel::MatmulF16`](super::Kernel::MatmulF16), one set per context: every product converts its
/// operands into them just before it runs (products run one after another, so sharing them
/// costs nothing but the largest product's size), and they grow with the largest product
/// seen (ops built before keep the buffers they were built with).
pub struct CoopScratch {
    /// Weights of one range, f16 tiles.
    pub w16: wgpu::Buffer,
    /// Inputs, f16 tiles.
    pub xh: wgpu::Buffer,
    /// Each token's inverse input scale.
    pub inv: wgpu::Buffer,
    /// The column slices' partial products.
    pub part: wgpu::Buffer,
}
