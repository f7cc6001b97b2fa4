//! `tritium serve --lora`: LoRA adapters loaded beside each model they fit and chosen per
//! request by llama-server's `lora` field (`[{"id": 0, "scale": 0.5}]`, the other adapters off;
//! absent: each adapter at its `--lora` scale), on loopback on the CPU backend with the tiny
//! Qwen3 and its adapters (tests/fixtures/lora, checked against llama.cpp and peft by
//! tests/lora_reference.rs). Greedy completions must equal `tritium run --lora` with the same
//! adapters and scales, through raw HTTP and through the official `openai` Python package
//! (`extra_body`); a bad `lora` field is a 400 naming it; an adapter that does not fit a model
//! (SmolLM2, also served) is skipped for it and refused when a request names it.

mod serve_support;

use serde_json::{json, Value};
use serve_support::*;

const QWEN3: &str = "tests/fixtures/arch/tiny-qwen3.gguf";
const ALL: &str = "tests/fixtures/lora/tiny-qwen3-all.gguf";
const QV: &str = "tests/fixtures/lora/tiny-qwen3-qv.gguf";
const PROMPT: &str = "once upon a time";

/// `tritium run` on the tiny Qwen3 with these `--lora` arguments: the greedy text of 8 tokens.
fn cli_text(lora: &[String]) -> String {
    let mut cmd = tritium();
    cmd.args(["run", &repo_path(QWEN3).display().to_string(), "-p", PROMPT])
        .args([
            "--max-tokens",
            "8",
            "--temperature",
            "0",
            "--backend",
            "cpu",
            "--json",
        ]);
    for l in lora {
        cmd.args(["--lora", l]);
    }
    let out = cmd.output().expect("tritium runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["text"].as_str().unwrap().to_string()
}

fn completion(server: &Server, model: &str, lora: Option<Value>) -> Reply {
    let mut body = json!({ "model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0 });
    if let Some(l) = lora {
        body["lora"] = l;
    }
    server.post_json("/v1/completions", &body)
}

fn text_of(r: &Reply) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn requests_choose_the_servers_adapters() {
    let all = repo_path(ALL).display().to_string();
    let qv = repo_path(QV).display().to_string();
    let qwen3 = repo_path(QWEN3).display().to_string();
    let server = Server::start(&[&qwen3, "--lora", &all, "--lora", &format!("{qv}:0")]);
    let listed = server.get("/lora-adapters").json();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed[0]["id"], 0);
    assert_eq!(listed[1]["scale"], 0.0);
    assert!(listed[1]["path"]
        .as_str()
        .unwrap()
        .ends_with("tiny-qwen3-qv.gguf"));

    let base = cli_text(&[]);
    let one = cli_text(std::slice::from_ref(&all));
    let two = cli_text(&[format!("{all}:0.5"), format!("{qv}:1.5")]);
    assert_ne!(base, one, "the adapter changes nothing");
    // No `lora`: the --lora scales (qv at 0, so the first adapter alone).
    assert_eq!(text_of(&completion(&server, "tiny-qwen3", None)), one);
    // `lora: []`: every adapter off.
    assert_eq!(
        text_of(&completion(&server, "tiny-qwen3", Some(json!([])))),
        base
    );
    let chosen = json!([{ "id": 0, "scale": 0.5 }, { "id": 1, "scale": 1.5 }]);
    assert_eq!(
        text_of(&completion(&server, "tiny-qwen3", Some(chosen.clone()))),
        two
    );
    // The default again after other choices: nothing cached under them is reused.
    assert_eq!(text_of(&completion(&server, "tiny-qwen3", None)), one);

    for (bad, expect) in [
        (json!([{ "id": 5 }]), "invalid adapter id 5"),
        (json!([{ "id": 0, "scale": "x" }]), "must be a number"),
        (json!([{ "id": -1 }]), "must be an adapter index"),
        (json!([{ "id": 0 }, { "id": 0 }]), "given twice"),
        (json!("all"), "must be an array"),
        (json!([3]), "must be an object"),
    ] {
        let r = completion(&server, "tiny-qwen3", Some(bad.clone()));
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["param"], "lora", "{bad}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(expect),
            "{bad}: {e}"
        );
    }

    // SmolLM2: the adapters do not fit, so it runs alone, and naming one is refused.
    let r = completion(&server, MODEL, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = completion(&server, MODEL, Some(json!([{ "id": 0 }])));
    assert_eq!(r.status, 400, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("does not apply to this model"), "{msg}");

    // The official openai package, the field passed as llama-server's clients pass it.
    let python = repo_path(".venv-clients/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: scripts/setup.sh installs the client packages",
        python.display()
    );
    let script = r#"
import json, sys
from openai import OpenAI
url, prompt, lora = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = OpenAI(base_url=url + "/v1", api_key="none")
r = client.completions.create(model="tiny-qwen3", prompt=prompt, max_tokens=8, temperature=0,
                              extra_body={"lora": lora})
print(json.dumps(r.choices[0].text))
"#;
    let out = std::process::Command::new(python)
        .args(["-c", script, &format!("http://{}", server.addr), PROMPT])
        .arg(chosen.to_string())
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text: String = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        text, two,
        "the openai client's completion with two adapters"
    );
}

#[test]
fn an_adapter_that_fits_no_model_is_refused_per_request() {
    // The Phi-3 adapter fits neither SmolLM2 nor anything else served: the server starts
    // (models load on demand), logs why, and a request naming it gets the reason.
    let phi3 = repo_path("tests/fixtures/lora/tiny-phi3-all.gguf")
        .display()
        .to_string();
    let server = Server::start(&["--lora", &phi3]);
    let r = completion(&server, MODEL, Some(json!([{ "id": 0 }])));
    assert_eq!(r.status, 400, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("architecture phi3"), "{msg}");
    let (_, stderr) = {
        drop(r);
        let mut s = server;
        let _ = s.child.kill();
        s.wait()
    };
    assert!(stderr.contains("adapter 0 does not apply"), "{stderr}");
}
