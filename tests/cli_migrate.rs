//! `tritium migrate` end to end: the committed Trellis v2 fixture migrated on disk must
//! validate and dequantize exactly as the committed v3 fixture of the same model does.

use std::path::Path;
use std::process::{Command, Output};

const V2: &str = "tests/fixtures/trellis/v2";
const V3: &str = "tests/fixtures/trellis/v3";

fn tritium(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .output()
        .expect("runs")
}

fn show(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `tritium dump` of `tensor` from `model`, as raw bytes.
fn dump(model: &str, tensor: &str, out: &Path) -> Vec<u8> {
    let o = tritium(&["dump", model, tensor, "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{model} {tensor}: {}", show(&o));
    std::fs::read(out).unwrap()
}

#[test]
fn migrated_v2_validates_and_dumps_as_the_v3_fixture() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("v3");
    let o = tritium(&["migrate", V2, out.to_str().unwrap(), "--shard-size", "8KB"]);
    assert!(o.status.success(), "{}", show(&o));
    let summary = String::from_utf8_lossy(&o.stdout);
    assert!(
        summary.contains("6 shards") && summary.contains("30 tensors"),
        "{summary}"
    );
    assert!(summary.contains("63367 bytes"), "{summary}");

    let files = names(&out);
    assert!(files.iter().all(|f| !f.ends_with(".part")), "{files:?}");
    assert!(files.contains(&"model-00006-of-00006.safetensors".to_string()));
    assert!(files.contains(&"model.safetensors.index.json".to_string()));

    let migrated = out.to_str().unwrap();
    let o = tritium(&["validate", migrated]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(show(&o).contains("valid (Trellis v3"), "{}", show(&o));

    // Every quantized weight dequantizes to the same bytes as from the committed v3 fixture.
    let o = tritium(&["inspect", "--json", V3]);
    assert!(o.status.success(), "{}", show(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let quantized: Vec<&str> = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["dtype"].as_str().unwrap().starts_with("trellis-"))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(quantized.contains(&"model.layers.0.self_attn.k_proj.weight"));
    for name in quantized {
        let ours = dump(migrated, name, &tmp.path().join("ours.f32"));
        let reference = dump(V3, name, &tmp.path().join("reference.f32"));
        assert!(!ours.is_empty());
        assert!(ours == reference, "{name}: migrated dump differs from v3");
    }
}

#[test]
fn migrate_refuses_a_non_empty_output_and_cleans_up_after_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), b"keep me").unwrap();
    let o = tritium(&["migrate", V2, busy.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(show(&o).contains("not empty"), "{}", show(&o));
    assert_eq!(names(&busy), ["notes.txt"]);

    // A v3 input is refused, and the output folder it would have created is gone.
    let out = tmp.path().join("new");
    let o = tritium(&["migrate", V3, out.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(show(&o).contains("not a Trellis v2 folder"), "{}", show(&o));
    assert!(!out.exists());

    // An empty folder is fine to migrate into.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = tritium(&["migrate", V2, empty.to_str().unwrap()]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(show(&o).contains("1 shard,"), "{}", show(&o));

    let o = tritium(&["migrate", V2, "x", "--shard-size", "lots"]);
    assert!(!o.status.success());
    assert!(show(&o).contains("--shard-size"), "{}", show(&o));
}
