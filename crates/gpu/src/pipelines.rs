//! Compiling and caching pipelines and binding their buffers: the [`GpuContext`] methods that
//! turn a [`Kernel`] of the registry into a pipeline for this device.

use std::sync::Arc;

use super::context::GpuContext;
use super::error::GpuError;
use super::kernels::runtime_checks;
use super::kernels::{Kernel, PipelineKey, Variant};

impl GpuContext {
    /// The best variant this device supports.
    pub fn variant(&self) -> Variant {
        Variant {
            f16: self.features.shader_f16,
            subgroups: self.features.subgroups,
        }
    }

    /// The variant [`GpuContext::kernel_with`] compiles `kernel` in at `workgroup_size`: the
    /// device's best, less subgroups where the kernel's segmented sums need subgroups the
    /// device's may not be, or where the caller's [`crate::KernelPolicy`] keeps the norms off
    /// them.
    pub fn variant_for(&self, kernel: Kernel, workgroup_size: u32) -> Variant {
        let mut variant = self.variant();
        // Segmented sums through subgroups hold only where every subgroup spans whole runs
        // and the workgroup is made of whole subgroups.
        let (min, max) = (
            self.features.subgroup_min_size,
            self.features.subgroup_max_size,
        );
        if kernel.segment() > 0 && (min < kernel.segment() || max == 0 || workgroup_size % max != 0)
        {
            variant.subgroups = false;
        }
        // The caller may keep the norms on workgroup-memory reductions (`KernelPolicy`).
        if !self.policy.norm_subgroups && kernel.is_rms_norm() {
            variant.subgroups = false;
        }
        variant
    }

    /// The pipeline for `key`, compiled once and cached. Shader compilation errors come back as
    /// [`GpuError::Shader`] rather than aborting.
    pub fn pipeline(&self, key: PipelineKey) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        let mut cache = self
            .pipelines
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let src = key
            .kernel
            .source()
            .ok_or_else(|| GpuError::Unsupported(key.kernel.label()))?;
        let wgsl = key.kernel.wgsl(key.variant)?;
        let label = key.kernel.label();
        let mut constants = vec![("WG", f64::from(key.workgroup_size))];
        constants.extend(key.kernel.constants());
        if let Some((tpr, rpt)) = key.mapping {
            constants.extend([("TPR", f64::from(tpr)), ("RPT", f64::from(rpt))]);
        }
        if let Some(span) = key.span {
            constants.push(("SPAN", f64::from(span)));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Wgsl(wgsl.into()),
        };
        // SAFETY: the checks turned off (`runtime_checks`) are the loop bounding, and every
        // loop of these kernels ends (tests/gpu_uniforms.rs, `every_loop_ends`), and the
        // division guards, and every integer divisor is non-zero (the same file,
        // `unguarded_divisors_are_nonzero`).
        let module = unsafe {
            self.device
                .create_shader_module_trusted(desc, runtime_checks())
        };
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: None,
                module: &module,
                entry_point: Some(src.entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        if let Some(err) = block_on_scope(scope) {
            return Err(GpuError::Shader {
                kernel: label,
                message: err.to_string(),
            });
        }
        let p = Arc::new(pipeline);
        cache.insert(key, p.clone());
        Ok(p)
    }

    /// The pipeline for `kernel` with this device's best variant and the kernel's default
    /// workgroup size (or `workgroup_size` when given).
    pub fn kernel(
        &self,
        kernel: Kernel,
        workgroup_size: Option<u32>,
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        self.kernel_with(kernel, workgroup_size, None, None)
    }

    /// [`GpuContext::kernel`] with the kernel's `TPR` and `RPT` constants set (see
    /// [`PipelineKey::mapping`]) and the K-quant integer-dot matvecs' `SPAN` (see
    /// [`PipelineKey::span`]).
    pub fn kernel_with(
        &self,
        kernel: Kernel,
        workgroup_size: Option<u32>,
        mapping: Option<(u32, u32)>,
        span: Option<u32>,
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        let default = kernel.source().map_or(64, |s| s.default_workgroup_size);
        let workgroup_size = workgroup_size.unwrap_or(default);
        let variant = self.variant_for(kernel, workgroup_size);
        self.pipeline(PipelineKey {
            kernel,
            variant,
            workgroup_size,
            mapping,
            span,
        })
    }

    /// Run `f`, which makes GPU objects, turning a wgpu validation error it raises (a binding
    /// over the device's limits, say) into an error naming `what` instead of wgpu's default
    /// panic. Natively only: in the browser such errors reach the device's uncaptured-error
    /// handler.
    pub fn validated<T>(
        &self,
        what: impl FnOnce() -> String,
        f: impl FnOnce() -> Result<T, GpuError>,
    ) -> Result<T, GpuError> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let made = f();
        let err = block_on_scope(scope);
        let made = made?;
        match err {
            Some(e) => Err(GpuError::Validation(format!("{}: {e}", what()))),
            None => Ok(made),
        }
    }

    /// A bind group for `pipeline`'s group 0 with each buffer bound at its binding.
    pub fn bind_at(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: *i,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// A bind group for `pipeline`'s group 0 with `buffers` bound at 0, 1, 2, ... in order.
    pub fn bind(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        let at: Vec<(u32, &wgpu::Buffer)> = (0..).zip(buffers.iter().copied()).collect();
        self.bind_at(pipeline, &at)
    }
}

/// Wait for an error scope natively; in the browser errors surface asynchronously through the
/// device's uncaptured-error handler instead.
fn block_on_scope(scope: wgpu::ErrorScopeGuard) -> Option<wgpu::Error> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        pollster::block_on(scope.pop())
    }
    #[cfg(target_arch = "wasm32")]
    {
        drop(scope);
        None
    }
}
