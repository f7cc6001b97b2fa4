//! `tritium pull | list | rm` and model names in `inspect`, end to end: the binary against a
//! real HTTP server on loopback, into a store in a temporary folder.

mod delivery_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use delivery_support::{model_files, FaultServer};
use tritium::formats::rdrr::{hash_hex, HashAlgorithm};

const SMOLLM2: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn tritium(args: &[&str], store: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .env("TRITIUM_STORE", store)
        .stdin(Stdio::null())
        .output()
        .expect("runs")
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&o.stdout));
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_list_inspect_rm() {
    let files = model_files(6, 3);
    let server = FaultServer::start(files.clone()).await;
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let url = server.url();

    // The store comes from TRITIUM_STORE here; --store wins over it.
    let other = tmp.path().join("other");
    let args = ["pull", &url, "--name", "tiny", "--json", "--store"];
    let mut with_flag: Vec<&str> = args.to_vec();
    with_flag.push(other.to_str().unwrap());
    let s = json(&tritium(&with_flag, &store));
    assert_eq!(s["name"], "tiny");
    assert!(other.join("models/tiny/manifest.json").is_file());
    assert!(!store.exists());

    let s = json(&tritium(
        &["pull", &url, "--name", "tiny", "--json"],
        &store,
    ));
    assert_eq!(s["already_present"], false);
    assert_eq!(s["kind"], "rdrr");
    let total: u64 = files.values().map(|b| b.len() as u64).sum();
    assert_eq!(s["bytes"], total);
    assert_eq!(s["path"], store.join("models/tiny").display().to_string());

    // A name derived from the URL (its last path component).
    let s = json(&tritium(&["pull", &url, "--json"], &store));
    assert_eq!(s["name"], "m");

    let l = json(&tritium(&["list", "--json"], &store));
    let models = l["models"].as_array().unwrap();
    let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["m", "tiny"]);
    assert_eq!(models[1]["format"], "RDRR");
    assert_eq!(models[1]["bytes"], total);
    assert_eq!(
        models[1]["shards"],
        files.keys().filter(|k| k.starts_with("shard_")).count()
    );
    assert_eq!(l["bytes_used"], 2 * total);
    let human = tritium(&["list"], &store);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("tiny") && text.contains("RDRR"), "{text}");

    // inspect takes the store name.
    let i = json(&tritium(&["inspect", "tiny", "--json"], &store));
    assert_eq!(i["format"], "RDRR v1");
    assert_eq!(i["tensor_count"], 14);
    let o = tritium(&["inspect", "nothing-here"], &store);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("nothing-here") && err.contains("models"),
        "{err}"
    );

    // rm refuses without -y when stdin is not a terminal, and removes with it.
    let o = tritium(&["rm", "tiny"], &store);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("-y"));
    assert!(store.join("models/tiny").is_dir());
    let o = tritium(&["rm", "tiny", "-y"], &store);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!store.join("models/tiny").exists());
    let o = tritium(&["rm", "tiny", "-y"], &store);
    assert!(!o.status.success());
    let o = tritium(&["rm", "../m", "-y"], &store);
    assert!(!o.status.success());
    assert!(store.join("models/m").is_dir());

    // A failing pull leaves an incomplete download that list shows as such, and exits non-zero.
    server.faults(|f| {
        f.missing.insert("shard_00001.bin".into());
    });
    let o = tritium(&["pull", &url, "--name", "broken"], &store);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("404") && err.contains("shard_00001.bin"),
        "{err}"
    );
    let l = json(&tritium(&["list", "--json"], &store));
    assert_eq!(l["models"].as_array().unwrap().len(), 1);
    assert_eq!(l["partial"][0]["name"], "broken");
    assert!(!tritium(&["inspect", "broken"], &store).status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_a_real_gguf_with_its_sha256() {
    assert!(
        Path::new(SMOLLM2).exists(),
        "{SMOLLM2} is missing: run scripts/fetch-models.sh"
    );
    let bytes = std::fs::read(SMOLLM2).unwrap();
    let sha = hash_hex(HashAlgorithm::Sha256, &bytes);
    let server =
        FaultServer::start(BTreeMap::from([("smol.gguf".to_string(), bytes.clone())])).await;
    server.faults(|f| {
        f.drop_at
            .insert("smol.gguf".into(), vec![bytes.len() as u64 / 3]);
    });
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("{}smol.gguf", server.url());
    let s = json(&tritium(
        &["pull", &url, "--sha256", &sha, "--json"],
        tmp.path(),
    ));
    assert_eq!(s["name"], "smol");
    assert_eq!(s["kind"], "gguf");
    assert_eq!(s["sha256"], sha);
    let path = tmp.path().join("models/smol.gguf");
    assert!(std::fs::read(&path).unwrap() == bytes);
    let r = server.requests("smol.gguf");
    assert_eq!(r.len(), 2);
    assert!(r[1].range.is_some());
    // Resolved by name like a path.
    let by_name = json(&tritium(&["inspect", "smol", "--json"], tmp.path()));
    let by_path = json(&tritium(&["inspect", SMOLLM2, "--json"], tmp.path()));
    assert_eq!(by_name, by_path);
}

/// The whole delivery path with the real binaries: `serve-model` converts the tiny BitNet GGUF
/// to RDRR and serves it on loopback, `pull` fetches it (shards, groups and the extra files the
/// converter lists: its GGUF metadata and tokenizer) into a store, and `run` by store name gives
/// the greedy ids the GGUF itself gives; so does `run` given the URL itself (the model pulled
/// into another store on the way, as `tritium::open` does for a URL).
#[test]
fn a_served_gguf_pulled_into_the_store_runs_identically() {
    use std::io::{BufRead, BufReader};
    let gguf = "tests/fixtures/bitnet/tiny-i2s.gguf";
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut server = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(["serve-model", gguf, "--port", "0"])
        .env("TRITIUM_STORE", dir.path().join("served"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve-model starts");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL printed: {line:?}"))
        .trim_end_matches('/')
        .to_string();
    let pulled = tritium(&["pull", &url, "--name", "tiny", "--json"], &store);
    let run = |model: &str, store: &Path| {
        let o = tritium(
            &[
                "run",
                model,
                "--ids",
                "509,17,300,44",
                "--max-tokens",
                "8",
                "--backend",
                "cpu",
                "--json",
            ],
            store,
        );
        json(&o)["generated_ids"].clone()
    };
    let by_url_store = dir.path().join("by-url");
    let by_url = run(&url, &by_url_store);
    let _ = server.kill();
    let _ = server.wait();
    json(&pulled);
    let from_gguf = run(gguf, &store);
    assert_eq!(from_gguf.as_array().map(Vec::len), Some(8), "{from_gguf}");
    assert_eq!(run("tiny", &store), from_gguf);
    assert_eq!(by_url, from_gguf);
    let listed = json(&tritium(&["list", "--json"], &by_url_store));
    assert_eq!(
        listed["models"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    // `--store DIR` wins over $TRITIUM_STORE (here an empty folder, where "tiny" is unknown).
    let elsewhere = dir.path().join("elsewhere");
    let args = |store: Option<&Path>| {
        let mut a = vec!["run", "tiny", "--ids", "509,17,300,44", "--max-tokens", "8"];
        a.extend(["--backend", "cpu", "--json"]);
        if let Some(s) = store {
            a.extend(["--store", s.to_str().unwrap()]);
        }
        tritium(&a, &elsewhere)
    };
    let missing = args(None);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("tiny"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    assert_eq!(json(&args(Some(&store)))["generated_ids"], from_gguf);
}
