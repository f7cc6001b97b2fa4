//! Tests of the sampler: hand-worked cases, a plain reference implementation (full sort,
//! f64 probabilities, every stage written the obvious way), and draw statistics.

use std::collections::HashSet;

use super::*;
use crate::cpu::ops::top_k;

/// A seeded stream for the test inputs (not the sampler's).
fn rng(seed: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(seed ^ 0x5eed_7e57)
}

/// Uniform in [0, 1).
fn uniform(r: &mut ChaCha20Rng) -> f64 {
    unit(r.next_u64())
}

fn below(r: &mut ChaCha20Rng, n: usize) -> usize {
    (uniform(r) * n as f64) as usize
}

/// Random logits in [-8, 8]; with `ties`, on a 0.25 grid so that equal scores are common.
/// Sometimes a NaN or a -inf.
fn logits(r: &mut ChaCha20Rng, n: usize, ties: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let x = uniform(r);
            if x < 0.02 {
                f32::NAN
            } else if x < 0.04 {
                f32::NEG_INFINITY
            } else {
                let v = (uniform(r) * 16.0 - 8.0) as f32;
                if ties {
                    (v * 4.0).round() / 4.0
                } else {
                    v
                }
            }
        })
        .collect()
}

/// A random configuration; `top_k` in 1..=40 when `topk`, else 0.
fn config(r: &mut ChaCha20Rng, topk: bool) -> SamplerConfig {
    let pick = |r: &mut ChaCha20Rng| uniform(r) < 0.5;
    SamplerConfig {
        temperature: if uniform(r) < 0.15 {
            0.0
        } else {
            (0.05 + uniform(r) * 2.0) as f32
        },
        top_k: if topk { 1 + below(r, 40) } else { 0 },
        top_p: if pick(r) {
            (0.05 + uniform(r) * 0.95) as f32
        } else {
            1.0
        },
        min_p: if pick(r) {
            (uniform(r) * 0.3) as f32
        } else {
            0.0
        },
        repeat_penalty: if pick(r) {
            (1.0 + uniform(r)) as f32
        } else {
            1.0
        },
        repeat_last_n: below(r, 24),
        frequency_penalty: 0.0,
        presence_penalty: 0.0,
        seed: r.next_u64(),
    }
}

fn history(r: &mut ChaCha20Rng, vocab: usize) -> Vec<u32> {
    let n = below(r, 40);
    // A few ids past the vocabulary: the penalty must ignore them.
    (0..n).map(|_| below(r, vocab + 3) as u32).collect()
}

/// The reference: every stage the plain way, probabilities in f64.
fn reference(row: &[f32], cfg: &SamplerConfig, hist: &[u32]) -> Vec<(u32, f64)> {
    let window = &hist[hist.len() - cfg.repeat_last_n.min(hist.len())..];
    let seen: HashSet<u32> = window.iter().copied().collect();
    let mut c: Vec<(u32, f32)> = row
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let i = i as u32;
            if seen.contains(&i) {
                (
                    i,
                    if s > 0.0 {
                        s / cfg.repeat_penalty
                    } else {
                        s * cfg.repeat_penalty
                    },
                )
            } else {
                (i, s)
            }
        })
        .filter(|c| !c.1.is_nan())
        .collect();
    c.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
    if cfg.temperature == 0.0 {
        return vec![(c[0].0, 1.0)];
    }
    if cfg.top_k > 0 {
        c.truncate(cfg.top_k);
    }
    let probs = |c: &[(u32, f32)], t: f64| -> Vec<f64> {
        let m = f64::from(c[0].1);
        let e: Vec<f64> = c.iter().map(|x| ((f64::from(x.1) - m) / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|x| x / s).collect()
    };
    let p = probs(&c, 1.0);
    let mut cum = 0.0;
    let mut keep = c.len();
    for (i, pi) in p.iter().enumerate() {
        cum += pi;
        // top_p = 1 is off (as in llama.cpp), not "stop once rounding says 1".
        if cfg.top_p < 1.0 && cum >= f64::from(cfg.top_p) {
            keep = i + 1;
            break;
        }
    }
    let p = &p[..keep];
    let mut c: Vec<(u32, f32)> = c[..keep]
        .iter()
        .zip(p)
        .filter(|(_, &pi)| pi >= f64::from(cfg.min_p) * p[0])
        .map(|(x, _)| *x)
        .collect();
    c.sort_by_key(|x| x.0);
    let m = c.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
    let t = f64::from(cfg.temperature);
    let e: Vec<f64> = c
        .iter()
        .map(|x| ((f64::from(x.1) - f64::from(m)) / t).exp())
        .collect();
    let s: f64 = e.iter().sum();
    c.iter().zip(e).map(|(x, e)| (x.0, e / s)).collect()
}

fn by_id(mut d: Vec<(u32, f64)>) -> Vec<(u32, f64)> {
    d.sort_by_key(|x| x.0);
    d
}

fn sampler(cfg: SamplerConfig) -> Sampler {
    Sampler::new(cfg).expect("valid config")
}

/// Logits whose softmax is `probs`.
fn from_probs(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

fn temp(t: f32) -> SamplerConfig {
    SamplerConfig {
        temperature: t,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.0,
        ..SamplerConfig::default()
    }
}

#[test]
fn greedy_is_argmax_with_lowest_id_on_ties() {
    let mut s = sampler(SamplerConfig::greedy());
    assert_eq!(s.sample(Scores::Full(&[1.0, 3.0, 3.0, 2.0]), &[]), Ok(1));
    assert_eq!(s.sample(Scores::Full(&[f32::NAN, -1.0, -1.0]), &[]), Ok(1));
    let mut r = rng(1);
    for _ in 0..500 {
        let n = 1 + below(&mut r, 200);
        let row = logits(&mut r, n, true);
        // The plain argmax: the first strictly larger number wins.
        let mut best: Option<usize> = None;
        for (i, &v) in row.iter().enumerate() {
            if !v.is_nan() && best.is_none_or(|b| v > row[b]) {
                best = Some(i);
            }
        }
        let got = s.sample(Scores::Full(&row), &[]);
        match best {
            Some(b) if row[b] > f32::NEG_INFINITY => assert_eq!(got, Ok(b as u32)),
            Some(_) => assert_eq!(got, Err(SamplingError::NoFiniteScore)),
            None => assert_eq!(got, Err(SamplingError::AllNaN)),
        }
    }
    // No randomness consumed.
    let fresh = ChaCha20Rng::seed_from_u64(s.cfg.seed);
    assert_eq!(s.rng, fresh);
}

#[test]
fn top_k_one_is_greedy() {
    let mut r = rng(2);
    for _ in 0..500 {
        let n = 1 + below(&mut r, 300);
        let row = logits(&mut r, n, true);
        let hist = history(&mut r, n);
        let mut cfg = config(&mut r, true);
        cfg.top_k = 1;
        let greedy = SamplerConfig {
            temperature: 0.0,
            ..cfg
        };
        let a = sampler(cfg).sample(Scores::Full(&row), &hist);
        let b = sampler(greedy).sample(Scores::Full(&row), &hist);
        assert_eq!(a, b, "{cfg:?} {row:?}");
    }
}

#[test]
fn top_p_keeps_smallest_prefix_reaching_p() {
    // Probabilities 0.5, 0.3, 0.15, 0.05 under shuffled ids.
    let probs = [0.15, 0.5, 0.05, 0.3];
    let row = from_probs(&probs);
    for (p, kept) in [
        (0.45, vec![1]),
        (0.75, vec![1, 3]),
        (0.9, vec![1, 3, 0]),
        (0.97, vec![1, 3, 0, 2]),
    ] {
        let cfg = SamplerConfig {
            top_p: p,
            ..temp(1.0)
        };
        let d = sampler(cfg).distribution(Scores::Full(&row), &[]).unwrap();
        let ids: Vec<u32> = d.iter().map(|x| x.0).collect();
        assert_eq!(ids, kept, "top_p {p}");
        // Renormalized over what is kept.
        let mass: f64 = kept.iter().map(|&i| probs[i as usize]).sum();
        for (id, q) in d {
            assert!(
                (q - probs[id as usize] / mass).abs() < 1e-6,
                "top_p {p}: {id} {q}"
            );
        }
    }
    // Large rows without top-k, p near 1: the block-wise partial sort must find the same
    // prefix as the reference's full sort.
    let mut r = rng(3);
    for case in 0..40 {
        let n = 3000 + below(&mut r, 3000);
        let row = logits(&mut r, n, case % 2 == 0);
        let p = [0.5, 0.9, 0.99, 0.999, 0.9999][case % 5];
        let cfg = SamplerConfig {
            top_p: p,
            ..temp(0.9)
        };
        let got = by_id(sampler(cfg).distribution(Scores::Full(&row), &[]).unwrap());
        let want = reference(&row, &cfg, &[]);
        assert_eq!(got.len(), want.len(), "top_p {p}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.0, w.0);
            assert!((g.1 - w.1).abs() < 1e-9);
        }
    }
}

#[test]
fn min_p_drops_the_unlikely() {
    let probs = [0.15, 0.5, 0.05, 0.3];
    let row = from_probs(&probs);
    // min_p * 0.5 is the floor: 0.2 -> 0.1 (drops 0.05), 0.5 -> 0.25 (drops 0.15 too),
    // 0.7 -> 0.35 (only the best), 1 -> only the best.
    for (m, kept) in [
        (0.2, vec![0, 1, 3]),
        (0.5, vec![1, 3]),
        (0.7, vec![1]),
        (1.0, vec![1]),
    ] {
        let cfg = SamplerConfig {
            min_p: m,
            ..temp(1.0)
        };
        let d = sampler(cfg).distribution(Scores::Full(&row), &[]).unwrap();
        let ids: Vec<u32> = by_id(d).iter().map(|x| x.0).collect();
        assert_eq!(ids, kept, "min_p {m}");
    }
    // min_p = 1 keeps every candidate tied with the best.
    let cfg = SamplerConfig {
        min_p: 1.0,
        ..temp(1.0)
    };
    let d = sampler(cfg)
        .distribution(Scores::Full(&[2.0, 1.0, 2.0]), &[])
        .unwrap();
    assert_eq!(by_id(d), vec![(0, 0.5), (2, 0.5)]);
}

#[test]
fn repetition_penalty_like_llama_cpp() {
    let row = [2.0, -1.0, 1.5, 0.5, 0.0];
    let g = |n: usize, pen: f32, hist: &[u32]| {
        let cfg = SamplerConfig {
            repeat_penalty: pen,
            repeat_last_n: n,
            ..SamplerConfig::greedy()
        };
        sampler(cfg).sample(Scores::Full(&row), hist).unwrap()
    };
    // 2.0 / 2 = 1.0 < 1.5: id 2 wins.
    assert_eq!(g(64, 2.0, &[0, 1]), 2);
    // Only the last id is in a window of 1: id 0 keeps its 2.0.
    assert_eq!(g(1, 2.0, &[0, 1]), 0);
    // Off: a window of 0, or a penalty of 1.
    assert_eq!(g(0, 2.0, &[0]), 0);
    assert_eq!(g(64, 1.0, &[0]), 0);
    // Once per distinct id: three 0s still give 2.0 / 1.25 = 1.6 > 1.5 (not 2 / 1.25^3).
    assert_eq!(g(64, 1.25, &[0, 0, 0]), 0);
    // Ids past the vocabulary are ignored.
    assert_eq!(g(64, 2.0, &[99, 0]), 2);

    // The scores themselves: positive divided, negative (and zero) multiplied.
    let cfg = SamplerConfig {
        repeat_penalty: 2.0,
        repeat_last_n: 8,
        ..temp(1.0)
    };
    let d = by_id(
        sampler(cfg)
            .distribution(Scores::Full(&row), &[0, 1, 3, 4])
            .unwrap(),
    );
    let pen: [f64; 5] = [1.0, -2.0, 1.5, 0.25, 0.0];
    let z: f64 = pen.iter().map(|x| x.exp()).sum();
    for (id, q) in d {
        assert!((q - pen[id as usize].exp() / z).abs() < 1e-12, "{id}");
    }
    // A penalty below 1 rewards repeats.
    assert_eq!(g(64, 0.5, &[2]), 2);
}

/// The engine's contract: the best `candidates_needed` scores give the same tokens as the
/// whole row, step after step, with the same seed.
#[test]
fn top_candidates_give_the_full_row_token() {
    let mut r = rng(4);
    let mut compared = 0;
    for case in 0..3000 {
        let n = 1 + below(&mut r, 400);
        let row = logits(&mut r, n, case % 2 == 0);
        let hist = history(&mut r, n);
        let cfg = config(&mut r, true);
        let bound = cfg.candidates_needed().expect("top-k on, penalty >= 1");
        // The history-free bound, and the exact count for each step's history.
        for exact in [false, true] {
            let need = |h: &[u32]| {
                let n = cfg.candidates_needed_for(h).unwrap();
                assert!(n <= bound);
                if exact {
                    n
                } else {
                    bound
                }
            };
            let mut full = sampler(cfg);
            let mut part = sampler(cfg);
            let mut h = hist.clone();
            for _ in 0..4 {
                let top = top_k(&row, need(&h));
                let a = full.sample(Scores::Full(&row), &h);
                let b = part.sample(Scores::Top(&top), &h);
                assert_eq!(a, b, "case {case}: {cfg:?}");
                compared += 1;
                match a {
                    Ok(t) => h.push(t),
                    Err(_) => break,
                }
            }
            let top = top_k(&row, need(&h));
            let a = full.distribution(Scores::Full(&row), &h);
            let b = part.distribution(Scores::Top(&top), &h);
            assert_eq!(a, b, "case {case}: {cfg:?}");
        }
    }
    assert!(compared > 20_000);
}

/// Why `candidates_needed` adds `repeat_last_n`: with top-k alone, a penalized candidate
/// hides the one that overtakes it.
#[test]
fn penalty_needs_more_than_top_k_candidates() {
    let row = [5.0, 4.0, -3.0];
    let cfg = SamplerConfig {
        top_k: 1,
        repeat_penalty: 2.0,
        repeat_last_n: 4,
        ..temp(1.0)
    };
    let full = sampler(cfg).sample(Scores::Full(&row), &[0]).unwrap();
    assert_eq!(full, 1, "5 / 2 < 4");
    let short = sampler(cfg)
        .sample(Scores::Top(&top_k(&row, 1)), &[0])
        .unwrap();
    assert_eq!(short, 0, "the one candidate is all there is");
    assert_eq!(cfg.candidates_needed(), Some(5));
    assert_eq!(cfg.candidates_needed_for(&[0, 0, 0]), Some(2));
    let enough = sampler(cfg)
        .sample(Scores::Top(&top_k(&row, 2)), &[0])
        .unwrap();
    assert_eq!(enough, 1);
}

#[test]
fn candidates_needed_cases() {
    let g = SamplerConfig::greedy();
    assert_eq!(g.candidates_needed(), Some(1));
    let gp = SamplerConfig {
        repeat_penalty: 1.1,
        repeat_last_n: 64,
        ..g
    };
    assert_eq!(gp.candidates_needed(), Some(65));
    assert_eq!(gp.candidates_needed_for(&[7, 7, 8]), Some(3));
    assert_eq!(
        SamplerConfig {
            repeat_last_n: 0,
            ..gp
        }
        .candidates_needed(),
        Some(1)
    );
    // A penalty below 1 can lift any id to the top.
    assert_eq!(
        SamplerConfig {
            repeat_penalty: 0.9,
            ..gp
        }
        .candidates_needed(),
        None
    );
    let d = SamplerConfig::default();
    assert_eq!(d.candidates_needed(), Some(40));
    assert_eq!(SamplerConfig { top_k: 0, ..d }.candidates_needed(), None);
    let big = SamplerConfig {
        top_k: usize::MAX,
        repeat_penalty: 1.5,
        ..d
    };
    assert_eq!(big.candidates_needed(), Some(usize::MAX));
}

#[test]
fn distribution_matches_reference() {
    let mut r = rng(5);
    for case in 0..2000 {
        let n = 1 + below(&mut r, 300);
        let row = logits(&mut r, n, case % 2 == 0);
        let hist = history(&mut r, n);
        let cfg = config(&mut r, case % 3 != 0);
        let got = sampler(cfg).distribution(Scores::Full(&row), &hist);
        let Ok(got) = got else {
            // Only rows with no finite score fail; the reference cannot handle them.
            assert!(row.iter().all(|v| v.is_nan() || *v == f32::NEG_INFINITY));
            continue;
        };
        let want = by_id(reference(&row, &cfg, &hist));
        let got = by_id(got);
        let ids = |d: &[(u32, f64)]| d.iter().map(|x| x.0).collect::<Vec<_>>();
        assert_eq!(ids(&got), ids(&want), "case {case}: {cfg:?}");
        for (g, w) in got.iter().zip(&want) {
            // f64 softmax over at most a few hundred terms: far below 1e-9.
            assert!((g.1 - w.1).abs() < 1e-9, "case {case}: {g:?} {w:?}");
        }
    }
}

/// 0.999 quantiles of chi-square with 1..=9 degrees of freedom.
const CHI2_999: [f64; 9] = [
    10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88,
];

/// Draws `n` tokens and checks their frequencies against `want` (id, probability): the
/// chi-square statistic below its 0.999 quantile, and each bin within 4.5 standard
/// deviations (a binomial bin leaves that with probability < 1e-5). A correct sampler fails
/// a given seed with probability about 0.1%; the seeds here are fixed, so the test is
/// deterministic.
fn check_draws(cfg: SamplerConfig, row: &[f32], want: &[(u32, f64)], n: usize) {
    let mut s = sampler(cfg);
    let mut counts = vec![0usize; row.len()];
    for _ in 0..n {
        counts[s.sample(Scores::Full(row), &[]).unwrap() as usize] += 1;
    }
    let kept: HashSet<u32> = want.iter().map(|x| x.0).collect();
    for (id, &c) in counts.iter().enumerate() {
        assert!(
            c == 0 || kept.contains(&(id as u32)),
            "drew {id}, which was filtered out"
        );
    }
    let nf = n as f64;
    let mut chi2 = 0.0;
    for &(id, p) in want {
        let e = p * nf;
        let o = counts[id as usize] as f64;
        chi2 += (o - e) * (o - e) / e;
        let sd = (nf * p * (1.0 - p)).sqrt();
        assert!(
            (o - e).abs() <= 4.5 * sd,
            "id {id}: {o} draws, expected {e:.1} +- {sd:.1}"
        );
    }
    let df = want.len() - 1;
    assert!(chi2 < CHI2_999[df - 1], "chi2 {chi2:.2} with {df} df");
}

#[test]
fn temperature_draws_follow_softmax() {
    let row = [1.0f32, 0.5, 0.0, -0.5, 2.0, 1.5, -1.0, 0.2];
    for (t, seed) in [(0.7f32, 11u64), (1.0, 12), (1.8, 13)] {
        // softmax(row / t), computed here.
        let e: Vec<f64> = row
            .iter()
            .map(|&x| (f64::from(x) / f64::from(t)).exp())
            .collect();
        let z: f64 = e.iter().sum();
        let want: Vec<(u32, f64)> = e
            .iter()
            .enumerate()
            .map(|(i, x)| (i as u32, x / z))
            .collect();
        check_draws(SamplerConfig { seed, ..temp(t) }, &row, &want, 20_000);
    }
    // With the filters on: the reference's renormalized distribution.
    let cfg = SamplerConfig {
        temperature: 1.3,
        top_k: 6,
        top_p: 0.9,
        min_p: 0.05,
        seed: 14,
        ..temp(1.0)
    };
    let want = reference(&row, &cfg, &[]);
    assert!(want.len() >= 3 && want.len() < row.len());
    check_draws(cfg, &row, &want, 20_000);
}

#[test]
fn same_seed_same_tokens() {
    let mut r = rng(6);
    let row = logits(&mut r, 100, false);
    let cfg = SamplerConfig {
        seed: 42,
        ..temp(1.5)
    };
    let run = |cfg: SamplerConfig| {
        let mut s = sampler(cfg);
        (0..200)
            .map(|_| s.sample(Scores::Full(&row), &[]).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(cfg), run(cfg));
    assert_ne!(run(cfg), run(SamplerConfig { seed: 43, ..cfg }));
    // One u64 per draw, whatever the scores.
    let mut s = sampler(cfg);
    s.sample(Scores::Full(&row), &[]).unwrap();
    s.sample(Scores::Full(&[0.0]), &[]).unwrap();
    let mut fresh = ChaCha20Rng::seed_from_u64(42);
    fresh.next_u64();
    fresh.next_u64();
    assert_eq!(s.rng, fresh);
    // The draw is the inverse CDF at one uniform: on a flat row, floor(u * n).
    let mut s = sampler(SamplerConfig {
        seed: 7,
        ..temp(1.0)
    });
    let flat = [0.0f32; 1000];
    let toks: Vec<u32> = (0..4)
        .map(|_| s.sample(Scores::Full(&flat), &[]).unwrap())
        .collect();
    let mut check = ChaCha20Rng::seed_from_u64(7);
    let want: Vec<u32> = (0..4)
        .map(|_| (unit(check.next_u64()) * 1000.0) as u32)
        .collect();
    assert_eq!(toks, want);
}

#[test]
fn bad_settings_and_scores_are_errors() {
    let d = SamplerConfig::default();
    let bad = [
        (
            SamplerConfig {
                temperature: -0.1,
                ..d
            },
            "temperature",
        ),
        (
            SamplerConfig {
                temperature: f32::NAN,
                ..d
            },
            "temperature",
        ),
        (
            SamplerConfig {
                temperature: f32::INFINITY,
                ..d
            },
            "temperature",
        ),
        (SamplerConfig { top_p: 0.0, ..d }, "top_p"),
        (SamplerConfig { top_p: 1.01, ..d }, "top_p"),
        (
            SamplerConfig {
                top_p: f32::NAN,
                ..d
            },
            "top_p",
        ),
        (SamplerConfig { min_p: -0.01, ..d }, "min_p"),
        (SamplerConfig { min_p: 1.5, ..d }, "min_p"),
        (
            SamplerConfig {
                min_p: f32::NAN,
                ..d
            },
            "min_p",
        ),
        (
            SamplerConfig {
                repeat_penalty: 0.0,
                ..d
            },
            "repeat_penalty",
        ),
        (
            SamplerConfig {
                repeat_penalty: -1.0,
                ..d
            },
            "repeat_penalty",
        ),
        (
            SamplerConfig {
                repeat_penalty: f32::INFINITY,
                ..d
            },
            "repeat_penalty",
        ),
    ];
    for (cfg, field) in bad {
        let e = cfg.validate().unwrap_err();
        assert!(e.to_string().starts_with(field), "{e}");
        assert_eq!(Sampler::new(cfg).unwrap_err().to_string(), e.to_string());
        let e: crate::Error = e.into();
        assert!(e.to_string().contains(field));
    }
    assert!(d.validate().is_ok() && SamplerConfig::greedy().validate().is_ok());

    for cfg in [d, SamplerConfig::greedy()] {
        let mut s = sampler(cfg);
        assert_eq!(s.sample(Scores::Full(&[]), &[]), Err(SamplingError::Empty));
        assert_eq!(s.sample(Scores::Top(&[]), &[]), Err(SamplingError::Empty));
        let nan = [f32::NAN; 3];
        assert_eq!(
            s.sample(Scores::Full(&nan), &[]),
            Err(SamplingError::AllNaN)
        );
        let top = [(4, f32::NAN)];
        assert_eq!(s.sample(Scores::Top(&top), &[]), Err(SamplingError::AllNaN));
        let ninf = [f32::NEG_INFINITY, f32::NAN];
        assert_eq!(
            s.sample(Scores::Full(&ninf), &[]),
            Err(SamplingError::NoFiniteScore)
        );
        // +inf takes all the mass; the lowest id among several.
        let inf = [0.0, f32::INFINITY, 1.0, f32::INFINITY];
        assert_eq!(s.sample(Scores::Full(&inf), &[]), Ok(1));
    }
}

#[test]
fn config_serde() {
    let d = SamplerConfig::default();
    let json = serde_json::to_string(&d).unwrap();
    assert_eq!(serde_json::from_str::<SamplerConfig>(&json).unwrap(), d);
    let part: SamplerConfig = serde_json::from_str(r#"{"temperature": 0, "seed": 9}"#).unwrap();
    assert_eq!(
        part,
        SamplerConfig {
            temperature: 0.0,
            seed: 9,
            ..d
        }
    );
    assert!(part.is_greedy());
}

#[test]
fn unit_interval() {
    assert_eq!(unit(0), 0.0);
    assert!(unit(u64::MAX) < 1.0);
}

/// OpenAI's frequency and presence penalties: `frequency * count + presence * (count > 0)`
/// off the scores of the tokens this sampler generated (not the prompt's), on full rows and
/// on top candidates alike, with the candidate bound growing by the distinct generated ids.
#[test]
fn frequency_and_presence_penalties_lower_generated_tokens() {
    let cfg = SamplerConfig {
        frequency_penalty: 0.5,
        presence_penalty: 1.0,
        ..SamplerConfig::greedy()
    };
    assert_eq!(cfg.candidates_needed(), None);
    let row = [3.0f32, 2.9, 2.0, 0.0];
    // The prompt's ids are not penalized: token 0 wins.
    let mut s = Sampler::new(cfg).unwrap();
    assert_eq!(s.sample(Scores::Full(&row), &[0, 0, 0]).unwrap(), 0);
    // Generated once: 3.0 - 0.5 - 1.0 = 1.5 < 2.9.
    assert_eq!(s.candidates_needed_for(&[]), Some(2));
    assert_eq!(s.sample(Scores::Full(&row), &[0]).unwrap(), 1);
    // 0 and 1 once each: 1.5 and 1.4 against 2.0.
    assert_eq!(s.sample(Scores::Full(&row), &[0, 1]).unwrap(), 2);
    // 0: 1.5, 1: 1.4, 2: 0.5 (0 wins again), then 0 twice: 3 - 1 - 1 = 1.0 < 1.4.
    assert_eq!(s.sample(Scores::Full(&row), &[]).unwrap(), 0);
    let top = [(0u32, 3.0f32), (1, 2.9), (2, 2.0), (3, 0.0)];
    assert_eq!(s.sample(Scores::Top(&top), &[]).unwrap(), 1);
    // Negative penalties raise scores: only the whole row will do.
    let raise = SamplerConfig {
        presence_penalty: -1.0,
        ..SamplerConfig::greedy()
    };
    assert_eq!(
        Sampler::new(raise).unwrap().candidates_needed_for(&[]),
        None
    );
    let bad = SamplerConfig {
        frequency_penalty: f32::NAN,
        ..SamplerConfig::greedy()
    };
    assert!(Sampler::new(bad).is_err());
}
