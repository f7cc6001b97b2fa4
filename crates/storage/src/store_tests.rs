//! The [`ShardStore`] contract, checked on every store: partial downloads never look complete,
//! verified files survive a restart (a new store value on the same folder), commit makes the
//! model appear whole, delete removes it.

use super::*;

async fn contract<S: ShardStore>(store: &S, reopen: impl Fn() -> S) {
    assert!(store.list().await.unwrap().is_empty());
    assert_eq!(store.bytes_used().await.unwrap(), 0);

    let p = store.begin("m", "http://a/m/").await.unwrap();
    assert!(p.verified.is_empty() && p.bytes == 0);
    let mut w = store.append("m", "shard_00000.bin", false).await.unwrap();
    w.write(b"hello ").await.unwrap();
    w.write(b"world").await.unwrap();
    w.finish().await.unwrap();
    store
        .mark_verified("m", "shard_00000.bin", "ABCD")
        .await
        .unwrap();
    // A shard cut short: its writer dropped without finishing keeps what was written.
    let mut w = store.append("m", "shard_00001.bin", false).await.unwrap();
    w.write(b"part").await.unwrap();
    drop(w);
    store
        .write_partial_file("m", "manifest.json", br#"{"shards":[{},{}]}"#)
        .await
        .unwrap();
    assert!(store.mark_verified("m", "nothing.bin", "00").await.is_err());

    // Nothing is complete yet, from any view.
    assert!(store.list().await.unwrap().is_empty());
    assert!(store.get("m").await.unwrap().is_none());

    // A restart finds the state as it was left.
    let again = reopen();
    let p = again.begin("m", "http://a/m/").await.unwrap();
    assert_eq!(
        p.verified,
        [("shard_00000.bin".to_string(), "abcd".to_string())].into()
    );
    assert_eq!(p.bytes, 11 + 4 + 18);
    assert_eq!(
        again.partial_len("m", "shard_00001.bin").await.unwrap(),
        Some(4)
    );
    assert_eq!(again.partial_len("m", "missing").await.unwrap(), None);
    let mut buf = [0u8; 5];
    again
        .read_partial("m", "shard_00000.bin", 6, &mut buf)
        .await
        .unwrap();
    assert_eq!(&buf, b"world");
    assert!(again
        .read_partial("m", "shard_00000.bin", 8, &mut buf)
        .await
        .is_err());
    assert_eq!(
        again.partial_files("m").await.unwrap(),
        ["manifest.json", "shard_00000.bin", "shard_00001.bin"]
    );
    let listed = again.list_partial().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].source.as_deref(), Some("http://a/m/"));

    // Appending continues; truncating forgets the verified mark.
    let mut w = again.append("m", "shard_00001.bin", false).await.unwrap();
    w.write(b"-rest").await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(
        again.partial_len("m", "shard_00001.bin").await.unwrap(),
        Some(9)
    );
    let w = again.append("m", "shard_00000.bin", true).await.unwrap();
    w.finish().await.unwrap();
    assert_eq!(
        again.partial_len("m", "shard_00000.bin").await.unwrap(),
        Some(0)
    );
    let p = again.begin("m", "http://a/m/").await.unwrap();
    assert!(p.verified.is_empty());
    again
        .remove_partial_file("m", "shard_00000.bin")
        .await
        .unwrap();
    assert_eq!(
        again.partial_len("m", "shard_00000.bin").await.unwrap(),
        None
    );

    // Unsafe names are refused.
    for bad in ["../x", "/etc/passwd", "a//b", ""] {
        assert!(again.append("m", bad, true).await.is_err(), "{bad:?}");
    }
    for bad in ["../m", "a/b", ".m", ""] {
        assert!(again.begin(bad, "s").await.is_err(), "{bad:?}");
        assert!(again.delete(bad).await.is_err(), "{bad:?}");
    }

    // Commit: listed, whole, the partial state gone.
    again.commit("m", ModelKind::Rdrr, "").await.unwrap();
    let listed = again.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].name.as_str(),
            listed[0].kind,
            listed[0].bytes,
            listed[0].shards
        ),
        ("m", ModelKind::Rdrr, 9 + 18, 2)
    );
    assert!(again.list_partial().await.unwrap().is_empty());
    assert_eq!(again.bytes_used().await.unwrap(), 27);

    // A GGUF: one file becomes the model.
    again.begin("g", "http://a/g.gguf").await.unwrap();
    again
        .write_partial_file("g", "model.gguf", b"GGUF....")
        .await
        .unwrap();
    again
        .commit("g", ModelKind::Gguf, "model.gguf")
        .await
        .unwrap();
    let g = again.get("g").await.unwrap().unwrap();
    assert_eq!((g.kind, g.bytes, g.shards), (ModelKind::Gguf, 8, 0));

    // Another source for the same name starts over.
    again.begin("n", "http://a/n/").await.unwrap();
    again
        .write_partial_file("n", "x.bin", b"old")
        .await
        .unwrap();
    let p = again.begin("n", "http://b/n/").await.unwrap();
    assert_eq!(p.bytes, 0);
    assert_eq!(again.partial_len("n", "x.bin").await.unwrap(), None);

    // Delete: complete and partial.
    assert!(again.delete("m").await.unwrap());
    assert!(again.delete("n").await.unwrap());
    assert!(!again.delete("m").await.unwrap());
    let names: Vec<String> = again
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["g"]);
    assert_eq!(again.bytes_used().await.unwrap(), 8);
}

#[test]
fn memory_store_keeps_the_contract() {
    let store = MemoryStore::new();
    let shared = store.clone();
    pollster::block_on(contract(&store, move || shared.clone()));
}

#[test]
fn memory_store_quota() {
    pollster::block_on(async {
        let store = MemoryStore::with_quota(10);
        store.begin("m", "s").await.unwrap();
        assert_eq!(store.available_bytes().await.unwrap(), Some(10));
        let mut w = store.append("m", "a", false).await.unwrap();
        w.write(&[0; 8]).await.unwrap();
        assert!(w.write(&[0; 3]).await.is_err());
        assert_eq!(store.available_bytes().await.unwrap(), Some(2));
    });
}

#[cfg(not(target_arch = "wasm32"))]
mod fs {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn fs_store_keeps_the_contract() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let store = FsStore::new(&root);
        pollster::block_on(contract(&store, move || FsStore::new(&root)));
        // The layout of the brief: a plain folder per model, nothing else inside it.
        assert!(tmp.path().join("models/g.gguf").is_file());
        assert!(!tmp.path().join("models/m").exists());
    }

    #[test]
    fn fs_store_layout_and_crash_states() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FsStore::new(tmp.path());
        pollster::block_on(async {
            store.begin("m", "src").await.unwrap();
            store
                .write_partial_file("m", "manifest.json", b"{}")
                .await
                .unwrap();
            assert!(tmp.path().join("partial/m/manifest.json").is_file());
            assert!(tmp.path().join("partial/m.state.json").is_file());
            // A partial with a manifest is still not a model.
            assert_eq!(store.complete_path("m"), None);
            assert!(resolve_model("m", Some(tmp.path()))
                .unwrap_err()
                .to_string()
                .contains("incomplete"));
            // A state file that is not JSON (a crash mid-write cannot make one, but a disk
            // can): the files are kept, the verified marks forgotten.
            std::fs::write(tmp.path().join("partial/m.state.json"), b"{").unwrap();
            let p = store.begin("m", "src").await.unwrap();
            assert!(p.verified.is_empty());
            store.commit("m", ModelKind::Rdrr, "").await.unwrap();
            let dir = tmp.path().join("models/m");
            assert_eq!(store.complete_path("m"), Some(dir.clone()));
            assert_eq!(resolve_model("m", Some(tmp.path())).unwrap(), dir);
            // Paths win over names.
            let file = tmp.path().join("x.gguf");
            std::fs::write(&file, b"GGUF").unwrap();
            let arg = file.to_str().unwrap();
            assert_eq!(resolve_model(arg, Some(tmp.path())).unwrap(), file);
            let err = resolve_model("nope", Some(tmp.path()))
                .unwrap_err()
                .to_string();
            assert!(err.contains("nope") && err.contains("models"), "{err}");
            // A second commit of the same name is refused.
            store.begin("m", "src").await.unwrap();
            assert!(store.commit("m", ModelKind::Rdrr, "").await.is_err());
        });
    }

    // The writer thread: pieces of every size (below, at and above its 64 KiB buffer) land in
    // order, whether the writer is finished or dropped half-way (an interrupted shard keeps
    // every byte handed over, and nothing writes to the file after the drop), and a resumed
    // writer appends after them.
    #[test]
    fn fs_writer_keeps_order_and_every_byte() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FsStore::new(tmp.path());
        let sizes = [1usize, 7, 65536, 65537, 300_000, 3, 1 << 20, 12_345];
        let mut expected = Vec::new();
        pollster::block_on(async {
            store.begin("m", "src").await.unwrap();
            let mut w = store.append("m", "shard_00000.bin", true).await.unwrap();
            for (i, &n) in sizes.iter().enumerate() {
                let piece: Vec<u8> = (0..n).map(|k| (k * 31 + i * 7) as u8).collect();
                expected.extend_from_slice(&piece);
                if i % 2 == 0 {
                    w.write_shared(&Bytes::from(piece)).await.unwrap();
                } else {
                    w.write(&piece).await.unwrap();
                }
            }
            drop(w);
            let path = tmp.path().join("partial/m/shard_00000.bin");
            assert!(std::fs::read(&path).unwrap() == expected, "dropped writer");
            let mut w = store.append("m", "shard_00000.bin", false).await.unwrap();
            w.write_shared(&Bytes::from_static(b"tail")).await.unwrap();
            w.finish().await.unwrap();
            expected.extend_from_slice(b"tail");
            assert!(
                std::fs::read(&path).unwrap() == expected,
                "resumed and finished"
            );
        });
    }

    // A full disk (Linux's /dev/full refuses every write with ENOSPC): the error reaches the
    // caller, from a later `write` or from `finish`, naming the file; never a success.
    #[cfg(target_os = "linux")]
    #[test]
    fn fs_writer_reports_a_full_disk() {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut w = crate::FsWriter::for_file(file, "/dev/full".into()).unwrap();
        pollster::block_on(async {
            let piece = Bytes::from(vec![1u8; 1 << 20]);
            let mut first_error = None;
            for _ in 0..64 {
                if let Err(e) = w.write_shared(&piece).await {
                    first_error = Some(e);
                    break;
                }
            }
            let err = match first_error {
                Some(e) => e,
                None => w.finish().await.unwrap_err(),
            };
            let msg = err.to_string();
            assert!(msg.contains("/dev/full") && msg.contains("space"), "{msg}");
        });
    }

    #[test]
    fn store_root_precedence() {
        let flag = std::path::Path::new("/flag");
        assert_eq!(store_root(Some(flag)).unwrap(), flag);
    }
}
