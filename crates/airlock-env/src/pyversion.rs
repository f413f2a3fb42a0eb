//! Python version requests (`python = "3.10"`) and whether an interpreter's version meets one.
//!
//! We match requests ourselves so that finding an interpreter that is already installed
//! neither runs uv nor depends on uv's discovery, which gives up on the first broken pyenv shim
//! on `PATH`. Requests we do not understand (`pypy@3.10`, `cpython3.12`) go to uv as they are.

use std::path::PathBuf;

/// A comparison in a version specifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Ge,
    Le,
    Gt,
    Lt,
    Compatible,
}

/// One clause of a specifier set: `>=3.10`, `==3.11.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    pub op: Op,
    pub release: Vec<u64>,
    pub wildcard: bool,
}

/// What `python = "..."` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonRequest {
    /// An interpreter given by path.
    Path(PathBuf),
    /// A version prefix: "3", "3.10", "3.10.13", "3.10.*".
    Prefix(Vec<u64>),
    /// A specifier set: ">=3.10,<3.13".
    Specifiers(Vec<Clause>),
    /// Anything else; only uv can interpret it.
    Other(String),
}

impl PythonRequest {
    pub fn parse(text: &str) -> PythonRequest {
        let t = text.trim();
        if t.contains('/') {
            return PythonRequest::Path(PathBuf::from(t));
        }
        let plain = t.strip_suffix(".*").unwrap_or(t);
        if let Some(r) = parse_release(plain) {
            return PythonRequest::Prefix(r);
        }
        let clauses: Option<Vec<Clause>> = t.split(',').map(parse_clause).collect();
        match clauses {
            Some(c) if !c.is_empty() => PythonRequest::Specifiers(c),
            _ => PythonRequest::Other(t.to_string()),
        }
    }

    /// Whether `version` meets the request; `None` when only uv can tell.
    pub fn matches(&self, version: &[u64]) -> Option<bool> {
        match self {
            PythonRequest::Prefix(p) => Some(version.starts_with(p)),
            PythonRequest::Specifiers(cs) => Some(cs.iter().all(|c| c.matches(version))),
            PythonRequest::Path(_) | PythonRequest::Other(_) => None,
        }
    }

    /// Whether an interpreter whose name tells only part of its version (`python3.10` says
    /// `[3, 10]`) could meet the request; a cheap filter before running it.
    pub fn could_match(&self, partial: &[u64]) -> bool {
        match partial.len() {
            0 | 1 => true,
            2 => {
                (0..=60).any(|patch| self.matches(&[partial[0], partial[1], patch]) != Some(false))
            }
            _ => self.matches(partial) != Some(false),
        }
    }
}

impl Clause {
    fn matches(&self, version: &[u64]) -> bool {
        let v = &version[..version.len().min(3)];
        let prefix = v.starts_with(&self.release);
        match (self.op, self.wildcard) {
            (Op::Eq, true) => prefix,
            (Op::Ne, true) => !prefix,
            (Op::Eq, false) => cmp(v, &self.release).is_eq(),
            (Op::Ne, false) => !cmp(v, &self.release).is_eq(),
            (Op::Ge, _) => cmp(v, &self.release).is_ge(),
            (Op::Le, _) => cmp(v, &self.release).is_le(),
            (Op::Gt, _) => cmp(v, &self.release).is_gt(),
            (Op::Lt, _) => cmp(v, &self.release).is_lt(),
            (Op::Compatible, _) => {
                let head = &self.release[..self.release.len().saturating_sub(1).max(1)];
                cmp(v, &self.release).is_ge() && v.starts_with(head)
            }
        }
    }
}

/// Compares releases with missing components as zeros (3.10 == 3.10.0).
fn cmp(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().max(b.len());
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    (0..n)
        .map(|i| at(a, i).cmp(&at(b, i)))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

fn parse_clause(text: &str) -> Option<Clause> {
    let t = text.trim();
    let ops = [
        ("~=", Op::Compatible),
        ("==", Op::Eq),
        ("!=", Op::Ne),
        (">=", Op::Ge),
        ("<=", Op::Le),
        (">", Op::Gt),
        ("<", Op::Lt),
    ];
    let (rest, op) = ops
        .iter()
        .find_map(|(s, op)| t.strip_prefix(s).map(|r| (r.trim(), *op)))?;
    let (rest, wildcard) = match rest.strip_suffix(".*") {
        Some(r) if matches!(op, Op::Eq | Op::Ne) => (r, true),
        _ => (rest, false),
    };
    Some(Clause {
        op,
        release: parse_release(rest)?,
        wildcard,
    })
}

/// "3.10.13" → [3, 10, 13]; `None` unless it is dot-separated numbers only.
fn parse_release(text: &str) -> Option<Vec<u64>> {
    if text.is_empty() {
        return None;
    }
    text.split('.').map(|p| p.parse().ok()).collect()
}

/// The release numbers at the start of an interpreter's version: "3.13.0rc1" → [3, 13, 0].
pub fn release_of(version: &str) -> Vec<u64> {
    version
        .split('.')
        .map_while(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(req: &str, v: &str) -> Option<bool> {
        PythonRequest::parse(req).matches(&release_of(v))
    }

    #[test]
    fn prefixes() {
        assert_eq!(m("3.10", "3.10.13"), Some(true));
        assert_eq!(m("3.10", "3.11.7"), Some(false));
        assert_eq!(m("3.1", "3.10.13"), Some(false));
        assert_eq!(m("3", "3.12.1"), Some(true));
        assert_eq!(m("3.10.13", "3.10.13"), Some(true));
        assert_eq!(m("3.10.12", "3.10.13"), Some(false));
        assert_eq!(m("3.11.*", "3.11.7"), Some(true));
    }

    #[test]
    fn specifiers() {
        assert_eq!(m(">=3.10,<3.12", "3.11.7"), Some(true));
        assert_eq!(m(">=3.10,<3.12", "3.12.1"), Some(false));
        assert_eq!(m(">=3.10, <3.12", "3.9.18"), Some(false));
        assert_eq!(m("==3.10.*", "3.10.1"), Some(true));
        assert_eq!(m("!=3.10.*", "3.10.1"), Some(false));
        assert_eq!(m("~=3.10", "3.12.0"), Some(true));
        assert_eq!(m("~=3.10.2", "3.10.13"), Some(true));
        assert_eq!(m("~=3.10.2", "3.11.0"), Some(false));
        assert_eq!(m(">3.10", "3.10.13"), Some(true));
        assert_eq!(m("==3.10", "3.10.0"), Some(true));
        assert_eq!(m("<=3.11", "3.11.7"), Some(false));
        assert_eq!(release_of("3.13.0rc1"), [3, 13, 0]);
    }

    #[test]
    fn other_requests_are_left_to_uv() {
        assert_eq!(m("pypy@3.10", "3.10.13"), None);
        assert_eq!(m("cpython3.12", "3.12.1"), None);
        assert!(matches!(
            PythonRequest::parse("/opt/py/bin/python3"),
            PythonRequest::Path(_)
        ));
    }

    #[test]
    fn could_match_filters_by_name() {
        let r = PythonRequest::parse("3.10");
        assert!(r.could_match(&[3, 10]));
        assert!(!r.could_match(&[3, 11]));
        assert!(r.could_match(&[3]));
        let r = PythonRequest::parse(">=3.10.4,<3.11");
        assert!(r.could_match(&[3, 10]));
        assert!(!r.could_match(&[3, 10, 2]));
        assert!(!r.could_match(&[3, 9]));
    }
}
