//! Which files of a Hugging Face repository a `USER/REPO[:QUANT]` names, by llama.cpp's rule
//! for `-hf` (its `common/download.cpp`):
//!
//! - model files: paths ending in `.gguf` whose file name holds none of `mmproj`, `imatrix`,
//!   `mtp-`, `eagle3-`, `dflash-`, `dspark-` (projectors, importance matrices and drafters);
//! - with a tag, the first model file (in the listing's order) whose path holds the tag,
//!   compared case-insensitively, followed by `.` or `-`; without one, the first holding
//!   `Q4_K_M`, else `Q8_0`, else the first model file;
//! - shards `NAME-0000i-of-0000N.gguf` other than the first are never picked themselves; the
//!   pick brings every shard of its prefix and count.
//!
//! A quant's tag is what follows the last `-` or `.` of the name (split suffix and `.gguf`
//! removed), upper-cased: `SmolLM2-135M-Instruct.Q4_1.gguf` is `Q4_1`.

/// Tags tried, in order, when none is given (llama.cpp's default).
pub const DEFAULT_TAGS: [&str; 2] = ["Q4_K_M", "Q8_0"];

/// A GGUF path taken apart: prefix (before the split suffix), tag, 1-based shard and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitName {
    pub prefix: String,
    pub tag: String,
    pub index: u32,
    pub count: u32,
}

/// `path` (ending in `.gguf`) taken apart; `None` for any other file.
pub fn split_name(path: &str) -> Option<SplitName> {
    let stem = path.strip_suffix(".gguf")?;
    let (prefix, index, count) = shard_suffix(stem).unwrap_or((stem, 1, 1));
    let tag = prefix
        .rfind(['-', '.'])
        .map(|i| &prefix[i + 1..])
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .map(str::to_ascii_uppercase)
        .unwrap_or_default();
    Some(SplitName {
        prefix: prefix.to_string(),
        tag,
        index,
        count,
    })
}

/// `NAME-00002-of-00005` → `(NAME, 2, 5)` (five digits each, as llama.cpp writes them).
fn shard_suffix(stem: &str) -> Option<(&str, u32, u32)> {
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once('-')?;
    fn five(s: &str) -> Option<u32> {
        (s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    }
    let (index, count) = (five(index)?, five(count)?);
    (!prefix.is_empty()).then_some((prefix, index, count))
}

/// Whether `path` is a model file (not a projector, imatrix or drafter).
pub fn is_model(path: &str) -> bool {
    if !path.ends_with(".gguf") {
        return false;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    !["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"]
        .iter()
        .any(|k| name.contains(k))
}

/// Model files a pick may start from: not a later shard.
fn candidates(paths: &[String]) -> impl Iterator<Item = &String> {
    paths
        .iter()
        .filter(|p| is_model(p) && split_name(p).is_some_and(|s| s.count <= 1 || s.index == 1))
}

/// Whether `path` holds `tag` (ASCII case-insensitively) followed by `.` or `-`.
fn holds_tag(path: &str, tag: &str) -> bool {
    let (p, t) = (path.to_ascii_lowercase(), tag.to_ascii_lowercase());
    p.match_indices(&t)
        .any(|(i, _)| matches!(p.as_bytes().get(i + t.len()), Some(b'.' | b'-')))
}

/// The file `tag` picks (or the default pick when `tag` is `None`).
pub fn pick<'a>(paths: &'a [String], tag: Option<&str>) -> Option<&'a String> {
    let tags: Vec<&str> = match tag {
        Some(t) => vec![t],
        None => DEFAULT_TAGS.to_vec(),
    };
    for t in tags {
        if let Some(p) = candidates(paths).find(|p| holds_tag(p, t)) {
            return Some(p);
        }
    }
    match tag {
        None => candidates(paths).next(),
        Some(_) => None,
    }
}

/// Every shard of `first`'s split model in order (just `first` when it is not split).
pub fn shards_of(paths: &[String], first: &str) -> Vec<String> {
    let Some(s) = split_name(first).filter(|s| s.count > 1) else {
        return vec![first.to_string()];
    };
    let mut out: Vec<(u32, String)> = paths
        .iter()
        .filter_map(|p| {
            let o = split_name(p)?;
            (o.prefix == s.prefix && o.count == s.count).then(|| (o.index, p.clone()))
        })
        .collect();
    out.sort();
    out.dedup_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, p)| p).collect()
}

/// The quant tags of the repository's model files, sorted, each once.
pub fn quants(paths: &[String]) -> Vec<String> {
    let mut out: Vec<String> = candidates(paths)
        .filter_map(|p| split_name(p).map(|s| s.tag))
        .filter(|t| !t.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tags_and_shards_are_read_from_names() {
        let s = split_name("dir/Model-Q4_K_M-00002-of-00003.gguf").unwrap();
        assert_eq!((s.tag.as_str(), s.index, s.count), ("Q4_K_M", 2, 3));
        assert_eq!(s.prefix, "dir/Model-Q4_K_M");
        assert_eq!(split_name("a.Q4_1.gguf").unwrap().tag, "Q4_1");
        assert_eq!(split_name("a.q8_0.gguf").unwrap().tag, "Q8_0");
        assert!(split_name("README.md").is_none());
    }

    #[test]
    fn picks_follow_llama_cpp() {
        let files = v(&[
            "README.md",
            "m-mmproj-Q8_0.gguf",
            "m-F16.gguf",
            "m-Q8_0.gguf",
            "m-Q4_K_M-00001-of-00002.gguf",
            "m-Q4_K_M-00002-of-00002.gguf",
        ]);
        assert_eq!(pick(&files, None).unwrap(), "m-Q4_K_M-00001-of-00002.gguf");
        assert_eq!(pick(&files, Some("q8_0")).unwrap(), "m-Q8_0.gguf");
        assert_eq!(pick(&files, Some("Q5_K_M")), None);
        assert_eq!(
            shards_of(&files, "m-Q4_K_M-00001-of-00002.gguf"),
            v(&[
                "m-Q4_K_M-00001-of-00002.gguf",
                "m-Q4_K_M-00002-of-00002.gguf"
            ])
        );
        assert_eq!(quants(&files), v(&["F16", "Q4_K_M", "Q8_0"]));
        // No default tag present: the first model file.
        assert_eq!(
            pick(&v(&["x.md", "m.F16.gguf"]), None).unwrap(),
            "m.F16.gguf"
        );
    }
}
