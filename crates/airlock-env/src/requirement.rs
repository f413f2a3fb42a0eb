//! PEP 508 requirement strings, as far as we need to understand them.
//!
//! We never resolve anything ourselves (uv does), so a requirement stays the string the pack
//! author wrote. We only need three things from it: to refuse what would change the meaning of
//! the requirements file we hand to uv (an option such as `--index-url`, a second line), a
//! normalized form so that cosmetic differences (`Numpy >= 1.25` against `numpy>=1.25`) do not
//! change the content hash, and the project name, so that a resolver error can name the
//! requirement it is about.

/// Why a requirement string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadRequirement {
    Empty,
    Option,
    MultiLine,
}

impl BadRequirement {
    pub fn why(self) -> &'static str {
        match self {
            BadRequirement::Empty => "a requirement cannot be empty",
            BadRequirement::Option => {
                "options are not allowed in a requirement; use index-url, extra-index-urls or \
                 find-links"
            }
            BadRequirement::MultiLine => "a requirement must be a single line",
        }
    }
}

/// Checks that `text` is one requirement line uv can read as a requirement and nothing else.
pub fn check(text: &str) -> Result<(), BadRequirement> {
    let t = text.trim();
    if t.is_empty() {
        return Err(BadRequirement::Empty);
    }
    if t.contains(['\n', '\r', '\0']) {
        return Err(BadRequirement::MultiLine);
    }
    if t.starts_with('-') {
        return Err(BadRequirement::Option);
    }
    Ok(())
}

/// PEP 503 normalization of a project name: lowercase, runs of `-`, `_` and `.` become `-`.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// The project name a requirement is about, normalized; `None` for a bare URL or path.
pub fn name_of(requirement: &str) -> Option<String> {
    let t = requirement.trim();
    let end = t.find(|c: char| !is_name_char(c)).unwrap_or(t.len());
    let (name, rest) = t.split_at(end);
    if name.is_empty() || name.starts_with('.') || rest.starts_with([':', '/']) {
        return None;
    }
    Some(normalize_name(name))
}

/// The form that goes into the content hash: the name normalized, the version part without
/// whitespace, the marker with runs of whitespace collapsed.
pub fn normalize(requirement: &str) -> String {
    let t = requirement.trim();
    let (spec, marker) = match t.split_once(';') {
        Some((s, m)) => (s, Some(m)),
        None => (t, None),
    };
    let mut out = match name_of(spec) {
        Some(name) => {
            let end = spec.trim_start().find(|c: char| !is_name_char(c));
            let rest = end.map_or("", |e| &spec.trim_start()[e..]);
            let rest: String = rest.chars().filter(|c| !c.is_whitespace()).collect();
            format!("{name}{rest}")
        }
        None => spec.trim().to_string(),
    };
    if let Some(m) = marker {
        out.push_str("; ");
        out.push_str(&m.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    out
}

/// Whether `message` (uv's output) mentions the project `name` (normalized) as a word.
pub fn mentioned_in(message: &str, name: &str) -> bool {
    if name.is_empty() {
        return false;
    }
    let lower = message.to_ascii_lowercase();
    let variants = [name.to_string(), name.replace('-', "_")];
    variants.iter().any(|v| {
        lower.match_indices(v.as_str()).any(|(i, _)| {
            let before = lower[..i].chars().next_back();
            let after = lower[i + v.len()..].chars().next();
            let boundary = |c: Option<char>| c.is_none_or(|c| !is_name_char(c));
            // A trailing '.' ends a sentence ("... was not found.") rather than the name.
            let after_ok = boundary(after)
                || (after == Some('.')
                    && lower[i + v.len() + 1..]
                        .chars()
                        .next()
                        .is_none_or(char::is_whitespace));
            boundary(before) && after_ok
        })
    })
}

/// The first of `requirements` whose project uv's message names.
pub fn find_mentioned<'a>(
    message: &str,
    requirements: impl IntoIterator<Item = &'a String>,
) -> Option<&'a String> {
    requirements
        .into_iter()
        .find(|r| name_of(r).is_some_and(|n| mentioned_in(message, &n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(name_of("Numpy>=1.25"), Some("numpy".into()));
        assert_eq!(
            name_of("  Foo_Bar.baz [x] ; python_version<'3.11'"),
            Some("foo-bar-baz".into())
        );
        assert_eq!(name_of("torch @ https://x/torch.whl"), Some("torch".into()));
        assert_eq!(name_of("https://x/torch.whl"), None);
        assert_eq!(name_of("./wheels/a.whl"), None);
        assert_eq!(name_of("/abs/a.whl"), None);
    }

    #[test]
    fn normalization_ignores_cosmetics_only() {
        assert_eq!(normalize("Numpy >= 1.25"), normalize("numpy>=1.25"));
        assert_eq!(
            normalize("a ; python_version  <  '3.11'"),
            normalize("A;python_version < '3.11'")
        );
        assert_ne!(normalize("numpy>=1.25"), normalize("numpy>=1.26"));
        assert_ne!(normalize("numpy[a]"), normalize("numpy"));
    }

    #[test]
    fn refuses_options_and_lines() {
        assert_eq!(check("six"), Ok(()));
        assert_eq!(check("  "), Err(BadRequirement::Empty));
        assert_eq!(check("--index-url x"), Err(BadRequirement::Option));
        assert_eq!(check("-e ."), Err(BadRequirement::Option));
        assert_eq!(check("six\nidna"), Err(BadRequirement::MultiLine));
    }

    #[test]
    fn finds_the_requirement_uv_talks_about() {
        let reqs = vec![
            "six".to_string(),
            "airlock_no_such_package_xyz==1.0".to_string(),
        ];
        let msg = "Because airlock-no-such-package-xyz was not found in the package registry";
        assert_eq!(find_mentioned(msg, &reqs), Some(&reqs[1]));
        assert!(mentioned_in("needs six.", "six"));
        assert!(!mentioned_in("sixteen packages", "six"));
        assert!(!mentioned_in("six.moves", "six"));
        assert!(mentioned_in("foo_bar==1 is missing", "foo-bar"));
    }
}
