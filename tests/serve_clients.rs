//! The official `openai` and `ollama` Python packages against `tritium serve`
//! (tests/clients/test_clients.py, in the `.venv-clients` that scripts/setup.sh makes): chat
//! and completions, whole and streamed, usage, stop sequences, seeds, errors, and greedy text
//! equal to `tritium run --chat --temperature 0` on the same model.

mod serve_support;

use serve_support::*;

#[test]
fn official_python_clients() {
    let python = repo_path(".venv-clients/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: scripts/setup.sh installs the client packages",
        python.display()
    );
    let prompt = "What is the capital of France?";
    let max_tokens = 10;
    let expected = serde_json::json!({
        "prompt": prompt,
        "max_tokens": max_tokens,
        "text": cli_greedy_chat(prompt, max_tokens),
    });
    let server = Server::start(&["--api-key", "s3cret"]);
    let out = std::process::Command::new(python)
        .arg(repo_path("tests/clients/test_clients.py"))
        .arg(format!("http://{}", server.addr))
        .arg(MODEL)
        .arg(expected.to_string())
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
