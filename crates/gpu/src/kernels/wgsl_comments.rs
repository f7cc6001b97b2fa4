//! WGSL without its comments: what the browser's build (build.rs) keeps of every shader file.
//! WGSL has no string literals, so every `//` starts a comment to the end of its line; the
//! shader files have no block comments (`/* */`, which build.rs refuses). Every line keeps its
//! number and the columns of its code, so a compilation error points where it would in the
//! file, and the kernel assembly's line-based edits (`kquants::pair_wgsl`) find what they find
//! in the full text.

/// `wgsl` with each line's `//` comment and trailing whitespace removed, its lines kept.
pub fn strip_comments(wgsl: &str) -> String {
    wgsl.split('\n')
        .map(|line| line.split("//").next().unwrap_or("").trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}
