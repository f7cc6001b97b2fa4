//! `tritium bench kernels --quick --json` runs on the test device (lavapipe in CI) and reports
//! every figure it promises. Speed itself is never asserted: it is recorded in BENCHMARKS.md.

use std::process::Command;

/// Run `tritium <args>`, require success, and parse its JSON output.
fn json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn positive(x: &serde_json::Value) -> bool {
    x.as_f64().is_some_and(|f| f.is_finite() && f > 0.0)
}

#[test]
fn bench_kernels_quick_reports_every_figure() {
    let v = json(&[
        "bench", "kernels", "--quick", "--json", "--dtype", "Q4_K", "--dtype", "I2_S", "--dtype",
        "F16",
    ]);
    for key in [
        "copy_gb_per_s",
        "copy_engine_gb_per_s",
        "copy_kernel_gb_per_s",
        "empty_dispatch_us",
    ] {
        assert!(positive(&v[key]), "{key}: {}", v[key]);
    }
    let large = v["large"].as_array().unwrap();
    let dtypes: Vec<&str> = large.iter().map(|r| r["dtype"].as_str().unwrap()).collect();
    // A block format with an integer-dot decode kernel also reports its f32 kernel, for comparison.
    assert_eq!(
        dtypes,
        ["Q4_K", "Q4_K/f32", "I2_S", "F16"],
        "in the order asked for"
    );
    for r in large {
        for key in ["us_per_call", "gb_per_s", "fraction_of_copy"] {
            assert!(positive(&r[key]), "{} {key}", r["dtype"]);
        }
    }
    // Every model shape of those dtypes: BitNet's four I2_S shapes and F16 head, Llama's Q4_K ones.
    let shapes = v["shapes"].as_array().unwrap();
    assert_eq!(shapes.iter().filter(|s| s["dtype"] == "I2_S").count(), 4);
    assert_eq!(shapes.iter().filter(|s| s["dtype"] == "F16").count(), 1);
    assert_eq!(shapes.iter().filter(|s| s["dtype"] == "Q4_K").count(), 3);
    assert!(shapes.iter().all(|s| positive(&s["us_per_call"])));
}

/// `tritium bench generate --json` on the tiny BitNet fixture reports every decode figure
/// (greedy, sampled both ways, unfused, f32 matvecs) and the limit it is measured against.
#[test]
fn bench_generate_reports_every_figure() {
    let v = json(&[
        "bench",
        "generate",
        "tests/fixtures/bitnet/tiny-i2s.gguf",
        "--prompt",
        "8",
        "--decode",
        "4",
        "--json",
    ]);
    for key in [
        "prefill_tokens_per_s",
        "time_to_first_token_ms",
        "decode_tokens_per_s",
        "decode_unfused_tokens_per_s",
        "decode_f32_matvec_tokens_per_s",
        "decode_sampled_tokens_per_s",
        "decode_sampled_unprepared_tokens_per_s",
        "copy_gb_per_s",
        "limit_tokens_per_s",
        "fraction_of_limit",
        "gpu_bytes",
        "bytes_per_token",
    ] {
        assert!(positive(&v[key]), "{key}: {}", v[key]);
    }
    assert_eq!(v["prompt_tokens"], 8);
    assert_eq!(v["decode_tokens"], 4);
}

/// `tritium bench fetch` with BLAKE3: the synthetic model's 8 MiB groups are hashed as 1 MiB
/// subtrees while three shards stream at once over loopback HTTP, and every group verifies
/// against the writer's plain BLAKE3 group hashes (a mismatch fails the command) without
/// reading anything back.
#[test]
fn bench_fetch_checks_blake3_groups_as_they_stream() {
    let dir = tempfile::tempdir().unwrap();
    let v = json(&[
        "bench",
        "fetch",
        "--mib",
        "24",
        "--shard-mib",
        "3",
        "--parallel",
        "3",
        "--hash",
        "blake3",
        "--dir",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(v["algorithm"], "BLAKE3");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 2);
    for r in results {
        assert!(positive(&r["mb_per_s"]), "{r}");
        assert_eq!(r["group_read_back_mib"], 0.0, "{r}");
    }
}
