//! Finding the CUDA libraries at run time. The driver (`libcuda.so.1`) comes with the NVIDIA
//! driver and is on the loader's path; NVRTC and cuBLAS come with a CUDA toolkit or with the
//! `nvidia-*` Python wheels, often outside it. Those are looked for in the usual folders and
//! loaded by their full path (global symbols), after which the loader finds them by name.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::GdsError;

/// Libraries this process loaded by path (kept loaded for the process's life).
static LOADED: Mutex<Vec<libloading::os::unix::Library>> = Mutex::new(Vec::new());

/// The folders searched for CUDA libraries, in order: `$TRITIUM_CUDA_LIBS` (colon-separated),
/// `$CUDA_PATH`, `$CUDA_HOME`, the toolkits under `/usr/local`, the system's library folders,
/// and the `nvidia/*/lib` folders of Python environments (`$VIRTUAL_ENV`, conda, system).
pub fn library_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(v) = std::env::var_os("TRITIUM_CUDA_LIBS") {
        dirs.extend(std::env::split_paths(&v));
    }
    for var in ["CUDA_PATH", "CUDA_HOME", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    for toolkit in children(Path::new("/usr/local"), |n| n.starts_with("cuda-")) {
        dirs.push(toolkit.join("lib64"));
        dirs.push(toolkit.join("targets/x86_64-linux/lib"));
    }
    dirs.extend(
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/opt/conda/lib",
        ]
        .map(PathBuf::from),
    );
    let mut site = Vec::new();
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        site.push(PathBuf::from(venv).join("lib"));
    }
    site.extend(["/usr/local/lib", "/usr/lib", "/opt/conda/lib"].map(PathBuf::from));
    if let Some(home) = dirs::home_dir() {
        site.push(home.join(".local/lib"));
    }
    for lib in site {
        for python in children(&lib, |n| n.starts_with("python3")) {
            for packages in ["site-packages", "dist-packages"] {
                for pkg in children(&python.join(packages).join("nvidia"), |_| true) {
                    dirs.push(pkg.join("lib"));
                }
            }
        }
    }
    dirs.push("/usr/lib/python3/dist-packages/nvidia".into());
    dirs
}

/// The entries of `dir` whose names pass `keep`, sorted (none when it cannot be read).
fn children(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Load the first library named `file` (or `file.*`, the newest version first) in
/// [`library_dirs`] by its full path, with global symbols.
fn load_from_dirs(name: &'static str, file: &str) -> Result<(), GdsError> {
    let dirs = library_dirs();
    for dir in &dirs {
        let mut found = children(dir, |n| {
            (n == file || n.starts_with(&format!("{file}."))) && !n.contains(".alt.")
        });
        found.reverse();
        for path in found {
            // SAFETY: loading a CUDA library runs its initializers, which is what using it
            // means; the handle stays loaded for the process's life.
            let lib = unsafe {
                libloading::os::unix::Library::open(
                    Some(&path),
                    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                )
            };
            if let Ok(lib) = lib {
                LOADED.lock().unwrap_or_else(|e| e.into_inner()).push(lib);
                return Ok(());
            }
        }
    }
    Err(GdsError::Library {
        name,
        searched: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Make sure NVRTC loads (from the loader's path, or from [`library_dirs`]).
pub fn load_nvrtc() -> Result<(), GdsError> {
    // SAFETY: probing for the library only opens it.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Ok(());
    }
    // The builtins library sits beside NVRTC, which opens it by name.
    let _ = load_from_dirs("libnvrtc-builtins", "libnvrtc-builtins.so");
    load_from_dirs("NVRTC (libnvrtc.so)", "libnvrtc.so")?;
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(GdsError::Library {
            name: "NVRTC (libnvrtc.so)",
            searched: "a libnvrtc.so that loaded, but not under a name the runtime knows".into(),
        })
    }
}

/// Make sure cuBLAS loads (it needs cuBLASLt beside it).
pub fn load_cublas() -> Result<(), GdsError> {
    // SAFETY: probing for the library only opens it.
    if unsafe { cudarc::cublas::sys::is_culib_present() } {
        return Ok(());
    }
    let _ = load_from_dirs("cuBLASLt (libcublasLt.so)", "libcublasLt.so");
    load_from_dirs("cuBLAS (libcublas.so)", "libcublas.so")?;
    if unsafe { cudarc::cublas::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(GdsError::Library {
            name: "cuBLAS (libcublas.so)",
            searched: "a libcublas.so that loaded, but not under a name the runtime knows".into(),
        })
    }
}

/// Whether the CUDA driver library loads.
pub fn driver_present() -> bool {
    // SAFETY: probing for the library only opens it.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Make sure libcufile (GPUDirect Storage) loads (from the loader's path, or from
/// [`library_dirs`]).
pub fn load_cufile() -> Result<(), GdsError> {
    // SAFETY: probing for the library only opens it.
    if unsafe { cudarc::cufile::sys::is_culib_present() } {
        return Ok(());
    }
    load_from_dirs("libcufile (GPUDirect Storage)", "libcufile.so")?;
    // SAFETY: as above.
    match unsafe { cudarc::cufile::sys::is_culib_present() } {
        true => Ok(()),
        false => Err(GdsError::Library {
            name: "libcufile (GPUDirect Storage)",
            searched: "the loader's path after loading it by path".into(),
        }),
    }
}
