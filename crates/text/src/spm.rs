//! SentencePiece BPE as a merges-based BPE: the merge list derived from piece scores.
//!
//! SentencePiece (and llama.cpp's SPM tokenizer) repeatedly joins the adjacent pair whose joined
//! piece is in the vocabulary with the highest score. transformers' converter
//! (`SentencePieceExtractor`) turns that into BPE merges: every split of every piece into two
//! pieces of the vocabulary is a merge, ranked by the joined piece's score (highest first); merges
//! of equal score keep vocabulary order (the joined piece's id, then the left and right ids).
//! We do the same, over the pieces SentencePiece itself would build from text (normal pieces).

use std::collections::HashMap;

use super::gguf_vocab::TokenType;

/// Whether SentencePiece builds this piece from text (control, byte and unused pieces it never
/// produces by merging).
fn mergeable(t: TokenType) -> bool {
    matches!(
        t,
        TokenType::Normal | TokenType::Undefined | TokenType::UserDefined
    )
}

/// BPE merges equivalent to SentencePiece's score-driven merging.
pub(crate) fn merges_from_scores(
    tokens: &[String],
    scores: &[f32],
    types: &[TokenType],
) -> Vec<(String, String)> {
    let ids: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .filter(|&(i, _)| mergeable(types[i]))
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    // (score, joined id, left id, right id, left, right)
    let mut merges: Vec<(f32, usize, usize, usize, &str, &str)> = Vec::new();
    for (joined, piece) in tokens.iter().enumerate() {
        if !mergeable(types[joined]) {
            continue;
        }
        for (split, _) in piece.char_indices().skip(1) {
            let (l, r) = piece.split_at(split);
            if let (Some(&li), Some(&ri)) = (ids.get(l), ids.get(r)) {
                merges.push((scores[joined], joined, li, ri, l, r));
            }
        }
    }
    // Highest score first; ties in vocabulary order. `total_cmp` keeps NaN scores (never seen in
    // real files) from breaking the sort.
    merges.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    merges
        .into_iter()
        .map(|(_, _, _, _, l, r)| (l.to_string(), r.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_follow_scores_then_vocabulary_order() {
        let tokens: Vec<String> = ["<unk>", "a", "b", "c", "ab", "bc", "abc", "<0x41>"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let scores = [0.0, -1.0, -2.0, -3.0, -5.0, -4.0, -6.0, 0.0];
        let mut types = vec![TokenType::Normal; tokens.len()];
        types[0] = TokenType::Unknown;
        types[7] = TokenType::Byte;
        let m = merges_from_scores(&tokens, &scores, &types);
        let m: Vec<(&str, &str)> = m.iter().map(|(l, r)| (l.as_str(), r.as_str())).collect();
        assert_eq!(
            m,
            [("b", "c"), ("a", "b"), ("a", "bc"), ("ab", "c")],
            "bc (-4) before ab (-5) before abc (-6), whose two splits keep id order"
        );
    }
}
