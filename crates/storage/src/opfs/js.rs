//! The OPFS calls the store makes, as small async functions over web-sys, each working in a
//! window and in a worker alike (`navigator.storage` is looked up on the global object).

use js_sys::{Promise, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    Blob, FileSystemCreateWritableOptions, FileSystemDirectoryHandle, FileSystemFileHandle,
    FileSystemGetDirectoryOptions, FileSystemGetFileOptions, FileSystemHandle,
    FileSystemHandleKind, FileSystemRemoveOptions, FileSystemWritableFileStream, StorageManager,
};

use crate::store::StoreError;

/// The folder under the origin's OPFS root the store keeps everything in.
pub const OPFS_ROOT: &str = "tritium";
/// Complete and in-progress models, under [`OPFS_ROOT`].
pub(crate) const MODELS: &str = "models";

/// A failed OPFS call on `path` (relative to the models folder) as a store error.
pub(crate) fn io(path: &str, e: &JsValue) -> StoreError {
    StoreError::Io {
        path: format!("opfs:/{OPFS_ROOT}/{MODELS}/{path}"),
        message: error_text(e),
    }
}

/// Await a JS promise.
pub(crate) async fn wait(promise: Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(promise).await
}

/// The `name` of a JS error (`NotFoundError`, `QuotaExceededError`, `TypeError`, ...), or "".
pub(crate) fn error_name(e: &JsValue) -> String {
    Reflect::get(e, &"name".into())
        .ok()
        .and_then(|v| v.as_string())
        .unwrap_or_default()
}

/// A JS error as one line: `Name: message`, or whatever the value says about itself.
pub fn error_text(e: &JsValue) -> String {
    let message = Reflect::get(e, &"message".into())
        .ok()
        .and_then(|v| v.as_string());
    match (error_name(e), message) {
        (name, Some(m)) if !name.is_empty() => format!("{name}: {m}"),
        (_, Some(m)) => m,
        _ => js_sys::JSON::stringify(e)
            .ok()
            .and_then(|s| s.as_string())
            .or_else(|| e.as_string())
            .unwrap_or_else(|| format!("{e:?}")),
    }
}

fn is_not_found(e: &JsValue) -> bool {
    // A file where a folder was asked for (or the reverse) counts as absent.
    matches!(
        error_name(e).as_str(),
        "NotFoundError" | "TypeMismatchError"
    )
}

/// `navigator.storage` of this window or worker.
pub(crate) fn storage_manager() -> Result<StorageManager, JsValue> {
    let navigator = Reflect::get(&js_sys::global(), &"navigator".into())?;
    let storage = if navigator.is_undefined() || navigator.is_null() {
        JsValue::UNDEFINED
    } else {
        Reflect::get(&navigator, &"storage".into())?
    };
    if storage.is_undefined() || storage.is_null() {
        return Err(js_sys::Error::new(
            "navigator.storage is not available here (OPFS needs a secure context: https, \
             localhost or 127.0.0.1)",
        )
        .into());
    }
    Ok(storage.unchecked_into())
}

/// True in a dedicated worker, where files have `createSyncAccessHandle`.
pub(crate) fn has_sync_access_handles() -> bool {
    Reflect::get(&js_sys::global(), &"FileSystemFileHandle".into())
        .and_then(|class| Reflect::get(&class, &"prototype".into()))
        .and_then(|proto| Reflect::get(&proto, &"createSyncAccessHandle".into()))
        .is_ok_and(|f| f.is_function())
}

/// The origin's OPFS root folder.
pub(crate) async fn opfs_root() -> Result<FileSystemDirectoryHandle, JsValue> {
    Ok(wait(storage_manager()?.get_directory())
        .await?
        .unchecked_into())
}

/// `(usage, quota)` from `navigator.storage.estimate()`.
pub(crate) async fn estimate() -> Result<(u64, Option<u64>), JsValue> {
    let estimate = wait(storage_manager()?.estimate()?).await?;
    let field = |name: &str| {
        Reflect::get(&estimate, &name.into())
            .ok()
            .and_then(|v| v.as_f64())
            .map(|v| v.max(0.0) as u64)
    };
    Ok((field("usage").unwrap_or(0), field("quota")))
}

/// Ask the browser to keep this origin's storage under pressure (`navigator.storage.persist()`).
/// `None` where the call does not exist (workers).
pub(crate) async fn persist() -> Option<bool> {
    let storage = storage_manager().ok()?;
    let has = Reflect::get(&storage, &"persist".into()).is_ok_and(|f| f.is_function());
    if !has {
        return None;
    }
    let granted = wait(storage.persist().ok()?).await.ok()?;
    granted.as_bool()
}

/// The folder `name` inside `parent`; `None` when it does not exist and `create` is false.
pub(crate) async fn dir(
    parent: &FileSystemDirectoryHandle,
    name: &str,
    create: bool,
) -> Result<Option<FileSystemDirectoryHandle>, JsValue> {
    let options = FileSystemGetDirectoryOptions::new();
    options.set_create(create);
    match wait(parent.get_directory_handle_with_options(name, &options)).await {
        Ok(handle) => Ok(Some(handle.unchecked_into())),
        Err(e) if !create && is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The file `name` inside `parent`; `None` when it does not exist and `create` is false.
pub(crate) async fn file(
    parent: &FileSystemDirectoryHandle,
    name: &str,
    create: bool,
) -> Result<Option<FileSystemFileHandle>, JsValue> {
    let options = FileSystemGetFileOptions::new();
    options.set_create(create);
    match wait(parent.get_file_handle_with_options(name, &options)).await {
        Ok(handle) => Ok(Some(handle.unchecked_into())),
        Err(e) if !create && is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Remove the entry `name` of `parent` (a folder with everything in it). False when there was
/// none.
pub(crate) async fn remove(
    parent: &FileSystemDirectoryHandle,
    name: &str,
) -> Result<bool, JsValue> {
    let options = FileSystemRemoveOptions::new();
    options.set_recursive(true);
    match wait(parent.remove_entry_with_options(name, &options)).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One entry of a folder.
pub(crate) struct Entry {
    pub name: String,
    pub handle: FileSystemHandle,
}

impl Entry {
    pub(crate) fn is_dir(&self) -> bool {
        self.handle.kind() == FileSystemHandleKind::Directory
    }
}

/// The entries of a folder, sorted by name.
pub(crate) async fn entries(dir: &FileSystemDirectoryHandle) -> Result<Vec<Entry>, JsValue> {
    let iter = dir.values();
    let mut out = Vec::new();
    loop {
        let next = wait(iter.next()?).await?;
        if Reflect::get(&next, &"done".into())?.is_truthy() {
            break;
        }
        let handle: FileSystemHandle = Reflect::get(&next, &"value".into())?.unchecked_into();
        out.push(Entry {
            name: handle.name(),
            handle,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

async fn blob(handle: &FileSystemFileHandle) -> Result<Blob, JsValue> {
    Ok(wait(handle.get_file()).await?.unchecked_into())
}

/// The size of a file.
pub(crate) async fn file_size(handle: &FileSystemFileHandle) -> Result<u64, JsValue> {
    Ok(blob(handle).await?.size() as u64)
}

/// Fill `buf` from the file's bytes at `offset` (an error when the file is shorter).
pub(crate) async fn read_at(
    handle: &FileSystemFileHandle,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), JsValue> {
    let file = blob(handle).await?;
    let end = offset + buf.len() as u64;
    if end as f64 > file.size() {
        return Err(js_sys::Error::new(&format!(
            "read of {} bytes at {offset} is past the end ({} bytes)",
            buf.len(),
            file.size()
        ))
        .into());
    }
    let part = file.slice_with_f64_and_f64(offset as f64, end as f64)?;
    let bytes = Uint8Array::new(&wait(part.array_buffer()).await?);
    bytes.copy_to(buf);
    Ok(())
}

/// A whole (small) file.
pub(crate) async fn read_all(handle: &FileSystemFileHandle) -> Result<Vec<u8>, JsValue> {
    let file = blob(handle).await?;
    Ok(Uint8Array::new(&wait(file.array_buffer()).await?).to_vec())
}

/// A writable stream on the file: its bytes kept when `keep`, else empty.
pub(crate) async fn writable(
    handle: &FileSystemFileHandle,
    keep: bool,
) -> Result<FileSystemWritableFileStream, JsValue> {
    let options = FileSystemCreateWritableOptions::new();
    options.set_keep_existing_data(keep);
    Ok(wait(handle.create_writable_with_options(&options))
        .await?
        .unchecked_into())
}

/// Replace the file's contents with `bytes`, atomically: a writable stream writes to a
/// swap file that replaces the file when it closes.
pub(crate) async fn write_whole(
    handle: &FileSystemFileHandle,
    bytes: &[u8],
) -> Result<(), JsValue> {
    let stream = writable(handle, false).await?;
    let result = async {
        wait(stream.write_with_js_u8_array(&Uint8Array::from(bytes))?).await?;
        wait(stream.close()).await
    }
    .await;
    if result.is_err() {
        // Drop the swap file; the old contents stay.
        let _ = wait(stream.abort()).await;
    }
    result.map(|_| ())
}
