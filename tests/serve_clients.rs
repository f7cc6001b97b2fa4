//! The official `openai` and `ollama` Python packages (tests/clients/test_clients.py, in the
//! `.venv-clients` that scripts/setup.sh makes) and the official `openai` npm package
//! (tests/clients/openai_client.mjs, a devDependency `npm ci` installs) against `tritium
//! serve`: chat and completions, whole and streamed, usage, stop sequences, seeds, logprobs,
//! errors, and greedy text equal to `tritium run --chat --temperature 0` on the same model; and
//! CORS from a page in headless Chromium (tests/browser/run-serve-cors.mjs).

mod serve_support;

use serve_support::*;

/// What the client scripts expect: the prompt, the budget and the CLI's greedy text.
fn expected() -> serde_json::Value {
    let prompt = "What is the capital of France?";
    let max_tokens = 10;
    serde_json::json!({
        "prompt": prompt,
        "max_tokens": max_tokens,
        "text": cli_greedy_chat(prompt, max_tokens),
    })
}

#[test]
fn official_npm_openai_client() {
    let package = repo_path("node_modules/openai/package.json");
    assert!(
        package.is_file(),
        "{} is missing: scripts/setup.sh installs it (npm ci)",
        package.display()
    );
    let expected = expected();
    let server = Server::start(&["--api-key", "s3cret"]);
    let out = std::process::Command::new("node")
        .arg(repo_path("tests/clients/openai_client.mjs"))
        .arg(format!("http://{}", server.addr))
        .arg(MODEL)
        .arg(expected.to_string())
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn official_python_clients() {
    let python = repo_path(".venv-clients/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: scripts/setup.sh installs the client packages",
        python.display()
    );
    let expected = expected();
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

/// CORS from a real page: headless Chromium (tests/browser/run-serve-cors.mjs) streams a chat
/// from a page on another loopback origin, key and preflight included, and a disallowed
/// origin is refused by the browser.
#[test]
fn cors_from_a_page_in_headless_chromium() {
    let e = expected();
    let out = std::process::Command::new("node")
        .arg(repo_path("tests/browser/run-serve-cors.mjs"))
        .arg(e["prompt"].as_str().unwrap())
        .arg(e["max_tokens"].to_string())
        .arg(e["text"].as_str().unwrap())
        .env("TRITIUM_BIN", env!("CARGO_BIN_EXE_tritium"))
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}
