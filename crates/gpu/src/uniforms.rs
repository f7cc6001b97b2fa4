//! Uniform structs shared with WGSL. Each is `#[repr(C)]` + Pod and declared through
//! [`gpu_uniform!`](crate::gpu_uniform), which records its field offsets so a test can compare them with the layout
//! naga computes for the struct of the same name in the kernels' WGSL. The structs themselves are
//! in [`crate::kernels::params`].

/// A uniform struct mirrored in WGSL by a struct of the same name.
pub trait GpuUniform: bytemuck::Pod {
    const WGSL_NAME: &'static str;
    /// `(field name, byte offset)` in declaration order.
    fn fields() -> Vec<(&'static str, usize)>;
}

/// Declare a uniform struct mirrored in WGSL (same name, same field names, same order).
#[macro_export]
macro_rules! gpu_uniform {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Copy, Clone, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }

        impl $crate::uniforms::GpuUniform for $name {
            const WGSL_NAME: &'static str = stringify!($name);
            fn fields() -> Vec<(&'static str, usize)> {
                vec![$((stringify!($f), std::mem::offset_of!($name, $f))),*]
            }
        }
    };
}

/// One registered uniform: its WGSL name, Rust size and field offsets.
pub struct UniformLayout {
    pub name: &'static str,
    pub size: usize,
    pub fields: Vec<(&'static str, usize)>,
}

impl UniformLayout {
    pub fn of<T: GpuUniform>() -> Self {
        UniformLayout {
            name: T::WGSL_NAME,
            size: std::mem::size_of::<T>(),
            fields: T::fields(),
        }
    }
}
