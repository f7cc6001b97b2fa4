//! `tritium serve` end to end: the real binary on a free loopback port with SmolLM2-135M (Q4_1)
//! on the CPU backend, driven over real HTTP.
//!
//! Checked: OpenAI chat and completions, whole and streamed (role chunk, content chunks, the
//! finish chunk, the usage chunk, `[DONE]`), greedy text equal to `tritium run --chat
//! --temperature 0`, stop strings never emitted, seeded sampling reproducible, the
//! malformed-request table with each status and error shape, the key and CORS preflight, the
//! queue bound (503 with Retry-After), a disconnecting client cancelling its generation, the
//! Ollama routes, `/api/pull` from `tritium serve-model`, `tritium stop` draining a stream and
//! exiting 0, a second `serve` on the same port failing clearly.

mod serve_support;

use std::io::BufReader;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_support::*;

#[test]
fn openai_chat_and_completions_whole_and_streamed() {
    let server = Server::start(&[]);
    let prompt = "What is the capital of France?";
    let expected = cli_greedy_chat(prompt, 12);
    assert!(!expected.is_empty());

    // Whole.
    let r = server.post_json(
        "/v1/chat/completions",
        &chat(
            prompt,
            json!({ "temperature": 0, "max_tokens": 12, "user": "ignored" }),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], MODEL);
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    let choice = &v["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], expected.as_str());
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
    let finish = choice["finish_reason"].as_str().unwrap();
    assert_eq!(finish, if completion == 12 { "length" } else { "stop" });
    assert_eq!(
        v["usage"]["total_tokens"].as_u64().unwrap(),
        v["usage"]["prompt_tokens"].as_u64().unwrap() + completion
    );

    // Streamed, with usage.
    let r = server.post_json(
        "/v1/chat/completions",
        &chat(
            prompt,
            json!({ "temperature": 0, "max_tokens": 12, "stream": true,
                    "stream_options": { "include_usage": true } }),
        ),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.sse_data();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, expected);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"]["completion_tokens"].as_u64(),
        Some(completion)
    );
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], finish);
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert!(chunks[1..chunks.len() - 2]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null() && c["usage"].is_null()));

    // A stop string from the greedy text ends it there, and is not in the output.
    let word = expected
        .split_whitespace()
        .nth(2)
        .expect("a few words")
        .to_string();
    let r = server.post_json(
        "/v1/chat/completions",
        &chat(
            prompt,
            json!({ "temperature": 0, "max_tokens": 12, "stop": [word.clone()] }),
        ),
    );
    let v = r.json();
    let cut = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(cut, &expected[..expected.find(&word).unwrap()]);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // Seeded sampling: the same seed, the same text.
    let sampled = |seed: u64| {
        let r = server.post_json(
            "/v1/completions",
            &json!({ "model": MODEL, "prompt": "Once upon a time", "max_tokens": 8,
                     "temperature": 1.0, "seed": seed }),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["object"], "text_completion");
        v["choices"][0]["text"].as_str().unwrap().to_string()
    };
    assert_eq!(sampled(7), sampled(7));

    // Completions, streamed.
    let r = server.post_json(
        "/v1/completions",
        &json!({ "model": MODEL, "prompt": "Once upon a time", "max_tokens": 4,
                 "temperature": 0, "stream": true }),
    );
    let events = r.sse_data();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");

    // The model list.
    let v = server.get("/v1/models").json();
    assert_eq!(v["object"], "list");
    assert!(v["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == MODEL));
    assert_eq!(server.get("/health").status, 200);
    let metrics = server.get("/metrics").text();
    assert!(metrics.contains(
        "tritium_requests_total{method=\"POST\",route=\"/v1/chat/completions\",status=\"200\"} 3"
    ));
    assert!(metric(&server, "tritium_generated_tokens_total") > 0.0);
    assert!(metric(&server, "tritium_time_to_first_token_seconds_count") >= 5.0);
    assert!(metric(&server, "tritium_time_per_output_token_seconds_count") > 0.0);
    assert_eq!(metric(&server, "tritium_loaded_models"), 1.0);
    assert!(metrics.contains(&format!("tritium_queue_depth{{model=\"{MODEL}\"}} 0")));
}

#[test]
fn malformed_requests_get_their_status_and_shape() {
    let server = Server::start(&["--ctx", "64", "--max-body", "4096"]);
    let long = "word ".repeat(200);
    let table: Vec<(&str, Vec<u8>, u16, Option<&str>)> = vec![
        ("not JSON", b"{".to_vec(), 400, None),
        ("not an object", b"[1]".to_vec(), 400, None),
        ("empty", Vec::new(), 400, None),
        ("not UTF-8", b"{\"model\": \"\xff\"}".to_vec(), 400, None),
        (
            "no model",
            json!({"messages": []}).to_string().into_bytes(),
            400,
            Some("model"),
        ),
        (
            "model of the wrong type",
            chat("x", json!({}))
                .to_string()
                .replace(&format!("\"{MODEL}\""), "3")
                .into_bytes(),
            400,
            Some("model"),
        ),
        (
            "unknown model",
            json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]})
                .to_string()
                .into_bytes(),
            404,
            Some("model"),
        ),
        (
            "messages not a list",
            json!({"model": MODEL, "messages": "hi"})
                .to_string()
                .into_bytes(),
            400,
            Some("messages"),
        ),
        (
            "no messages",
            json!({"model": MODEL, "messages": []})
                .to_string()
                .into_bytes(),
            400,
            Some("messages"),
        ),
        (
            "message without role",
            json!({"model": MODEL, "messages": [{"content": "x"}]})
                .to_string()
                .into_bytes(),
            400,
            Some("messages[0].role"),
        ),
        (
            "n = 2",
            chat("x", json!({"n": 2})).to_string().into_bytes(),
            400,
            Some("n"),
        ),
        (
            "max_tokens 0",
            chat("x", json!({"max_tokens": 0})).to_string().into_bytes(),
            400,
            Some("max_tokens"),
        ),
        (
            "max_tokens huge",
            chat("x", json!({"max_tokens": 1u64 << 40}))
                .to_string()
                .into_bytes(),
            400,
            Some("messages"),
        ),
        (
            "max_tokens a string",
            chat("x", json!({"max_tokens": "5"}))
                .to_string()
                .into_bytes(),
            400,
            Some("max_tokens"),
        ),
        (
            "temperature too high",
            chat("x", json!({"temperature": 5}))
                .to_string()
                .into_bytes(),
            400,
            Some("temperature"),
        ),
        (
            "temperature a string",
            chat("x", json!({"temperature": "hot"}))
                .to_string()
                .into_bytes(),
            400,
            Some("temperature"),
        ),
        (
            "top_p above 1",
            chat("x", json!({"top_p": 1.5})).to_string().into_bytes(),
            400,
            Some("top_p"),
        ),
        (
            "penalty out of range",
            chat("x", json!({"presence_penalty": 3}))
                .to_string()
                .into_bytes(),
            400,
            Some("presence_penalty"),
        ),
        (
            "stop of the wrong type",
            chat("x", json!({"stop": 3})).to_string().into_bytes(),
            400,
            Some("stop"),
        ),
        (
            "stream not a boolean",
            chat("x", json!({"stream": "yes"})).to_string().into_bytes(),
            400,
            Some("stream"),
        ),
        (
            "top_logprobs over 20",
            chat("x", json!({"logprobs": true, "top_logprobs": 21}))
                .to_string()
                .into_bytes(),
            400,
            Some("top_logprobs"),
        ),
        (
            "top_logprobs without logprobs",
            chat("x", json!({"top_logprobs": 2}))
                .to_string()
                .into_bytes(),
            400,
            Some("top_logprobs"),
        ),
        (
            "logprobs not a boolean",
            chat("x", json!({"logprobs": 5})).to_string().into_bytes(),
            400,
            Some("logprobs"),
        ),
        (
            "prompt longer than the context",
            chat(&long, json!({})).to_string().into_bytes(),
            400,
            Some("messages"),
        ),
        (
            "body over the limit",
            chat(&"x".repeat(5000), json!({})).to_string().into_bytes(),
            413,
            None,
        ),
    ];
    for (what, body, status, param) in &table {
        let r = request(&server.addr, "POST", "/v1/chat/completions", &[], body);
        assert_eq!(r.status, *status, "{what}: {}", r.text());
        let v = r.json();
        let e = &v["error"];
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}: {v}"
        );
        assert!(e["type"].is_string(), "{what}: {v}");
        assert_eq!(e["param"].as_str(), *param, "{what}: {v}");
    }
    let r = server.post_json("/v1/chat/completions", &chat(&long, json!({})));
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    // Unknown fields are ignored.
    let r = server.post_json(
        "/v1/chat/completions",
        &chat(
            "Hi",
            json!({ "max_tokens": 2, "temperature": 0, "something_new": {"a": 1} }),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Completions: `logprobs` is the number of alternatives there.
    let r = server.post_json(
        "/v1/completions",
        &json!({ "model": MODEL, "prompt": "x", "logprobs": true }),
    );
    assert_eq!(
        (r.status, r.json()["error"]["param"].clone()),
        (400, json!("logprobs"))
    );
    // Completions: a prompt of the wrong type; Ollama's shape on its routes.
    let r = server.post_json("/v1/completions", &json!({ "model": MODEL, "prompt": 5 }));
    assert_eq!(
        (r.status, r.json()["error"]["param"].clone()),
        (400, json!("prompt"))
    );
    let r = server.post("/api/chat", "{");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].is_string());
    let r = server.post_json("/api/generate", &json!({ "model": "nope", "prompt": "x" }));
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].is_string());
    let r = server.post_json(
        "/api/generate",
        &json!({ "model": MODEL, "prompt": "x", "options": { "temperature": "hot" } }),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(server.get("/v1/nothing").status, 404);
    // The server is still well.
    assert_eq!(server.get("/health").status, 200);
}

#[test]
fn the_key_is_required_but_not_for_health_or_preflights() {
    let server = Server::start(&["--api-key", "s3cret", "--cors-origin", "http://app.example"]);
    let get =
        |path: &str, headers: &[(&str, &str)]| request(&server.addr, "GET", path, headers, b"");
    assert_eq!(get("/health", &[]).status, 200);
    let r = get("/v1/models", &[]);
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    assert_eq!(
        get("/v1/models", &[("Authorization", "Bearer wrong")]).status,
        401
    );
    assert_eq!(
        get("/v1/models", &[("Authorization", "Bearer s3cret")]).status,
        200
    );
    assert_eq!(get("/metrics", &[]).status, 401);
    let r = get("/api/tags", &[]);
    assert_eq!(r.status, 401);
    assert!(r.json()["error"].is_string());
    // A browser's preflight carries no key.
    let r = request(
        &server.addr,
        "OPTIONS",
        "/v1/chat/completions",
        &[
            ("Origin", "http://app.example"),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type",
            ),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    assert!(r
        .header("access-control-allow-headers")
        .is_some_and(|h| h.to_ascii_lowercase().contains("authorization")));
    // The real request from that origin gets the header too; another origin does not.
    let r = get(
        "/v1/models",
        &[
            ("Authorization", "Bearer s3cret"),
            ("Origin", "http://app.example"),
        ],
    );
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://app.example")
    );
    let r = get(
        "/v1/models",
        &[
            ("Authorization", "Bearer s3cret"),
            ("Origin", "http://evil.example"),
        ],
    );
    assert_eq!(r.header("access-control-allow-origin"), None);
}

#[test]
fn the_queue_is_bounded_and_a_client_that_leaves_cancels_its_generation() {
    let server = Server::start(&["--max-queue", "1"]);
    let mut running = open_stream(&server, 400);
    assert!(read_chunk(&mut running).is_some());
    // One waits behind it...
    let addr = server.addr.clone();
    let waiting = std::thread::spawn(move || {
        let body = chat("Hi", json!({ "max_tokens": 2, "temperature": 0 }));
        request(
            &addr,
            "POST",
            "/v1/chat/completions",
            &[],
            body.to_string().as_bytes(),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/api/ps").json()["models"][0]["queued"] != 2 {
        assert!(Instant::now() < deadline, "the second request never queued");
        std::thread::sleep(Duration::from_millis(50));
    }
    // ...and the next is refused at once.
    let r = server.post_json(
        "/v1/chat/completions",
        &chat("Hi", json!({ "max_tokens": 2 })),
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.header("retry-after").is_some());
    assert_eq!(r.json()["error"]["code"], "queue_full");
    // The streaming client leaves: its generation stops within a few tokens, and the one
    // waiting runs.
    let before = metric(&server, "tritium_generated_tokens_total");
    drop(running);
    let r = waiting.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(metric(&server, "tritium_cancelled_generations_total"), 1.0);
    let generated = metric(&server, "tritium_generated_tokens_total") - before;
    assert!(
        generated < 40.0,
        "{generated} tokens generated after the client left"
    );
}

#[test]
fn ollama_routes() {
    let store = tempfile::tempdir().unwrap();
    // A model in the store, loaded on demand by name (a link to the test model).
    let models = store.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(repo_path(MODEL_FILE), models.join("smol.gguf")).unwrap();
    let server = Server::start_in(store, &[]);

    // No repetition penalty (Ollama's default is 1.1, OpenAI's route's and `tritium run`'s
    // 1), so the text below can be compared with OpenAI's route.
    let r = server.post_json(
        "/api/chat",
        &json!({ "model": MODEL, "messages": [{ "role": "user", "content": "What is the capital of France?" }],
                 "options": { "temperature": 0, "num_predict": 6, "repeat_penalty": 1 } }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let lines = r.ndjson();
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true);
    assert_eq!(last["done_reason"], "length");
    assert_eq!(last["eval_count"], 6);
    for key in [
        "total_duration",
        "load_duration",
        "prompt_eval_count",
        "prompt_eval_duration",
        "eval_duration",
    ] {
        assert!(last[key].is_u64(), "{key}: {last}");
    }
    let text: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert!(lines[..lines.len() - 1].iter().all(|l| l["done"] == false));
    // The same text as OpenAI's route and as `tritium run --chat`.
    let openai = server.post_json(
        "/v1/chat/completions",
        &chat(
            "What is the capital of France?",
            json!({ "temperature": 0, "max_tokens": 6 }),
        ),
    );
    assert_eq!(
        openai.json()["choices"][0]["message"]["content"],
        text.as_str()
    );

    // Not streamed, by store name with Ollama's tag, raw.
    let r = server.post_json(
        "/api/generate",
        &json!({ "model": "smol:latest", "prompt": "The sky is", "raw": true, "stream": false,
                 "options": { "temperature": 0, "num_predict": 3, "seed": 1 } }),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["done"], true);
    assert_eq!(v["model"], "smol");
    assert!(v["response"].is_string() && v["context"].is_array());
    assert!(v["load_duration"].as_u64().unwrap() > 0);

    let tags = server.get("/api/tags").json();
    let names: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [MODEL, "smol"]);
    assert_eq!(tags["models"][0]["details"]["quantization_level"], "Q4_1");
    let ps = server.get("/api/ps").json();
    assert_eq!(ps["models"].as_array().unwrap().len(), 2);
    let show = server
        .post_json("/api/show", &json!({ "model": MODEL }))
        .json();
    assert_eq!(show["details"]["family"], "llama");
    assert!(show["template"].as_str().unwrap().contains("im_start"));
    assert!(server.get("/api/version").json()["version"].is_string());

    // keep_alive 0 without a prompt unloads.
    let r = server.post_json(
        "/api/generate",
        &json!({ "model": "smol", "keep_alive": 0 }),
    );
    assert_eq!(r.json()["done_reason"], "unload");
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.get("/api/ps").json()["models"]
        .as_array()
        .unwrap()
        .len()
        != 1
    {
        assert!(Instant::now() < deadline, "smol did not unload");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Delete: from the store, once.
    let del = |name: &str| {
        request(
            &server.addr,
            "DELETE",
            "/api/delete",
            &[],
            json!({ "model": name }).to_string().as_bytes(),
        )
    };
    assert_eq!(del("smol").status, 200);
    assert_eq!(del("smol").status, 404);
    assert_eq!(del(MODEL).status, 400);
    assert!(repo_path(MODEL_FILE).is_file());
    let tags = server.get("/api/tags").json();
    assert_eq!(tags["models"].as_array().unwrap().len(), 1);
}

#[test]
fn stop_drains_a_stream_and_a_second_server_on_the_port_fails() {
    let server = Server::start(&[]);
    // A second server on the same port fails at once, saying why.
    let out = tritium()
        .args([
            "serve",
            "--backend",
            "cpu",
            "--port",
            &server.port.to_string(),
            "--store",
        ])
        .arg(server.store_path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already in use"), "{err}");

    let ps = tritium()
        .arg("ps")
        .arg("--store")
        .arg(server.store_path())
        .output()
        .unwrap();
    assert!(ps.status.success());
    assert!(String::from_utf8_lossy(&ps.stdout).contains(MODEL));

    // A stream in flight when `stop` comes is finished, then the server exits 0.
    let mut stream = open_stream(&server, 6);
    let stop = tritium()
        .arg("stop")
        .arg("--store")
        .arg(server.store_path())
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let mut body = Vec::new();
    while let Some(c) = read_chunk(&mut stream) {
        body.extend_from_slice(&c);
    }
    assert!(String::from_utf8_lossy(&body).ends_with("data: [DONE]\n\n"));
    let store = server.store_path().to_path_buf();
    let file = store.join(format!("serve-{}.json", server.port));
    let (code, _) = server.wait();
    assert_eq!(code, Some(0));
    assert!(!file.exists());
    let again = tritium()
        .arg("stop")
        .arg("--store")
        .arg(&store)
        .output()
        .unwrap();
    assert!(!again.status.success());
}

#[test]
fn api_pull_fetches_from_serve_model_into_the_store() {
    // `tritium serve-model` serves the tiny BitNet fixture (converted to RDRR) on loopback.
    let source_store = tempfile::tempdir().unwrap();
    let mut source = tritium()
        .args([
            "serve-model",
            "tests/fixtures/bitnet/tiny-i2s.gguf",
            "--port",
            "0",
            "--store",
        ])
        .arg(source_store.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut BufReader::new(source.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://") && w.ends_with('/'))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    let server = Server::start(&[]);
    let r = server.post_json("/api/pull", &json!({ "model": url }));
    let _ = source.kill();
    let _ = source.wait();
    assert_eq!(r.status, 200);
    let lines = r.ndjson();
    assert_eq!(lines[0]["status"], "pulling manifest");
    let last = lines.last().unwrap();
    assert_eq!(last["status"], "success", "{lines:?}");
    let name = last["name"].as_str().unwrap().to_string();
    assert!(lines
        .iter()
        .any(|l| l["completed"].is_u64() && l["total"].is_u64()));
    let tags = server.get("/api/tags").json();
    assert!(tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == name.as_str()));
    // Not a URL: a clear 400.
    let r = server.post_json("/api/pull", &json!({ "model": "llama3" }));
    assert_eq!(r.status, 400);
}
