//! `tritium serve`'s loaded models, end to end on loopback (CPU backend, SmolLM2-135M Q4_1):
//! `--max-loaded` unloading the model idle longest and refusing while the others are busy,
//! `--max-memory` refusing a model larger than the limit, and Ollama's `num_ctx` loading the
//! model again with that context.

mod serve_support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_support::*;

#[test]
fn loading_past_max_loaded_unloads_the_idle_model_and_a_busy_one_gets_503() {
    let store = tempfile::tempdir().unwrap();
    let models = store.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(repo_path(MODEL_FILE), models.join("smol.gguf")).unwrap();
    let server = Server::start_in(store, &["--max-loaded", "1"]);
    let loaded = |server: &Server| -> Vec<String> {
        let ps = server.get("/api/ps").json();
        ps["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(loaded(&server), [MODEL]);
    let generate = |model: &str| {
        json!({ "model": model, "prompt": "The sky is", "raw": true, "stream": false,
                "options": { "temperature": 0, "num_predict": 2 } })
    };
    // While the loaded model generates, the other cannot take its place.
    let mut running = open_stream(&server, 400);
    assert!(read_chunk(&mut running).is_some());
    let r = server.post_json("/api/generate", &generate("smol"));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    assert!(
        r.json()["error"].as_str().unwrap().contains("--max-loaded"),
        "{}",
        r.text()
    );
    drop(running);
    // Once it is idle, it makes room.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = server.post_json("/api/generate", &generate("smol"));
        if r.status == 200 {
            assert_eq!(r.json()["eval_count"], 2);
            break;
        }
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(
            Instant::now() < deadline,
            "the running model never went idle"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(loaded(&server), ["smol"]);
    // The model named at start is loaded again on demand, in place of the other.
    let r = server.post_json("/api/generate", &generate(MODEL));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(loaded(&server), [MODEL]);
}

#[test]
fn a_model_over_the_memory_limit_is_refused_clearly() {
    let out = tritium()
        .args(["serve", MODEL_FILE, "--backend", "cpu", "--port", "0"])
        .args(["--max-memory", "1M", "--store"])
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("more than the server's memory limit of 1048576 bytes (--max-memory)"),
        "{err}"
    );
    let out = tritium()
        .args(["serve", "--port", "0", "--max-memory", "lots"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-memory \"lots\""));
}

#[test]
fn num_ctx_loads_the_model_again_with_that_context() {
    let server = Server::start(&["--ctx", "512"]);
    let context =
        |server: &Server| server.get("/api/ps").json()["models"][0]["context_length"].clone();
    assert_eq!(context(&server), 512);
    let generate = |options: Value| {
        let mut o = json!({ "temperature": 0, "num_predict": 3 });
        o.as_object_mut()
            .unwrap()
            .extend(options.as_object().unwrap().clone());
        json!({ "model": MODEL, "prompt": "The sky is", "raw": true, "stream": false, "options": o })
    };
    let first = server.post_json("/api/generate", &generate(json!({})));
    assert_eq!(first.status, 200, "{}", first.text());
    let r = server.post_json("/api/generate", &generate(json!({ "num_ctx": 300 })));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(context(&server), 300);
    // The reload is charged to the request, and the text is the same.
    assert!(r.json()["load_duration"].as_u64().unwrap() > 0);
    assert_eq!(r.json()["response"], first.json()["response"]);
    // The context stays until a request asks for another; past the trained context (8192),
    // the trained one.
    let r = server.post_json("/api/generate", &generate(json!({})));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(context(&server), 300);
    let r = server.post_json("/api/generate", &generate(json!({ "num_ctx": 1_000_000 })));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(context(&server), 8192);
    let r = server.post_json("/api/generate", &generate(json!({ "num_ctx": 0 })));
    assert_eq!(r.status, 400, "{}", r.text());
}
