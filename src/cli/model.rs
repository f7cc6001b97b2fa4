//! A model argument as the commands take it (a GGUF file, an RDRR or Trellis folder, or the
//! name of a model in the store), opened the library's one way ([`crate::session`]).

use std::path::Path;

use crate::cli::Error;
use crate::session::{self, OpenOptions, OpenedModel};
use crate::storage::DirFiles;

/// A model opened from disk.
pub type OpenModel = OpenedModel<DirFiles>;

/// Open `path` as whichever format it is; a path that does not exist is looked up as the name
/// of a model in the store (`$TRITIUM_STORE` or the cache folder). Errors name the path.
pub fn open(path: &Path) -> Result<OpenModel, Error> {
    Ok(session::open_path(&session::resolve(
        path,
        &OpenOptions::default(),
    )?)?)
}
