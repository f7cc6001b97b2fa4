//! Kernels compiled at run time by NVRTC for the device's architecture, and cached on disk
//! (`$XDG_CACHE_HOME/tritium/cuda`, keyed by the source, the architecture and NVRTC's version),
//! so a second start loads the binary instead of compiling.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};
use cudarc::nvrtc::sys as nv;
use sha2::{Digest, Sha256};

use crate::device::{Device, Kernel};
use crate::GdsError;

/// Where compiled kernels are cached (`$TRITIUM_CUDA_CACHE`, else the user's cache folder).
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TRITIUM_CUDA_CACHE") {
        return Some(PathBuf::from(d));
    }
    dirs::cache_dir().map(|d| d.join("tritium").join("cuda"))
}

fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters.
    unsafe { nv::nvrtcVersion(&mut major, &mut minor) };
    (major, minor)
}

fn check(what: &str, r: nv::nvrtcResult) -> Result<(), GdsError> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(GdsError::Compile {
            arch: String::new(),
            log: format!("{what}: {r:?}"),
        })
    }
}

/// Compile `source` for `arch` (`sm_90`) to a CUBIN, from the cache when it holds one.
pub fn compile_cubin(source: &str, arch: &str) -> Result<Vec<u8>, GdsError> {
    crate::libs::load_nvrtc()?;
    let options = [
        format!("--gpu-architecture={arch}"),
        "-std=c++17".to_string(),
        "--fmad=true".to_string(),
    ];
    let version = nvrtc_version();
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update(format!("{options:?} {version:?}").as_bytes());
    let key = hex::encode(h.finalize());
    let cached = cache_dir().map(|d| d.join(format!("{}-{arch}.cubin", &key[..32])));
    if let Some(bytes) = cached.as_ref().and_then(|p| std::fs::read(p).ok()) {
        return Ok(bytes);
    }
    let cubin = nvrtc_compile(source, &options).map_err(|e| match e {
        GdsError::Compile { log, .. } => GdsError::Compile {
            arch: arch.to_string(),
            log,
        },
        e => e,
    })?;
    if let Some(path) = cached {
        // A cache that cannot be written only costs the next start a compile.
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, &cubin).is_ok() && std::fs::rename(&tmp, &path).is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
    Ok(cubin)
}

fn nvrtc_compile(source: &str, options: &[String]) -> Result<Vec<u8>, GdsError> {
    let src = CString::new(source).map_err(|_| GdsError::Compile {
        arch: String::new(),
        log: "the source holds a NUL byte".into(),
    })?;
    let name = c"tritium.cu";
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings that outlive the program; no headers.
    check("create", unsafe {
        nv::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    let opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).expect("options have no NUL"))
        .collect();
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: the program just created, options that outlive the call.
    let compiled = unsafe { nv::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr()) };
    let log = program_log(prog);
    let result = if compiled != nv::nvrtcResult::NVRTC_SUCCESS {
        Err(GdsError::Compile {
            arch: String::new(),
            log: format!("{compiled:?}\n{log}"),
        })
    } else {
        let mut size = 0usize;
        // SAFETY: a compiled program; the buffer has the size NVRTC reports.
        check("CUBIN size", unsafe {
            nv::nvrtcGetCUBINSize(prog, &mut size)
        })
        .and_then(|_| {
            let mut cubin = vec![0u8; size];
            check("CUBIN", unsafe {
                nv::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char)
            })
            .map(|_| cubin)
        })
    };
    // SAFETY: ours, not used again.
    unsafe { nv::nvrtcDestroyProgram(&mut prog) };
    result
}

fn program_log(prog: nv::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: a created program; the buffer has the size NVRTC reports.
    if unsafe { nv::nvrtcGetProgramLogSize(prog, &mut size) } != nv::nvrtcResult::NVRTC_SUCCESS
        || size <= 1
    {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    unsafe { nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char) };
    CStr::from_bytes_until_nul(&buf)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A loaded module and its kernels by name.
pub struct Module {
    module: sys::CUmodule,
    kernels: HashMap<String, Kernel>,
    ctx: Arc<CudaContext>,
}

// SAFETY: module handles are usable from any thread of the context.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Module {
    /// Compile (or take from the cache) `source` for `device`'s architecture and load it.
    pub fn load(device: &Device, source: &str) -> Result<Module, GdsError> {
        let cubin = compile_cubin(source, &device.info().arch())?;
        device.bind()?;
        // SAFETY: a CUBIN NVRTC produced for this architecture.
        let module = unsafe { result::module::load_data(cubin.as_ptr() as *const _) }
            .map_err(GdsError::driver("module load"))?;
        Ok(Module {
            module,
            kernels: HashMap::new(),
            ctx: device_ctx(device),
        })
    }

    /// The kernel `name` (an `extern "C"` function of the source).
    pub fn kernel(&mut self, name: &str) -> Result<Kernel, GdsError> {
        if let Some(k) = self.kernels.get(name) {
            return Ok(k.clone());
        }
        let c = CString::new(name).map_err(|_| GdsError::NoKernel(name.into()))?;
        // SAFETY: a loaded module and a NUL-terminated name.
        let f = unsafe { result::module::get_function(self.module, c) }
            .map_err(|_| GdsError::NoKernel(name.into()))?;
        let k = Kernel {
            f,
            name: name.to_string(),
        };
        self.kernels.insert(name.to_string(), k.clone());
        Ok(k)
    }
}

fn device_ctx(device: &Device) -> Arc<CudaContext> {
    device.context()
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: ours; its kernels are not launched after the module goes.
            unsafe { result::module::unload(self.module) }.ok();
        }
    }
}
