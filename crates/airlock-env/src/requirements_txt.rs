//! A pack's `requirements.txt`, read when its `airlock.toml` has no `dependencies` key: most
//! node packs list what they need there, and a user who writes an `airlock.toml` with only a
//! `python` line expects those to be installed. An explicit `dependencies = []` means none.
//!
//! Only requirement lines are taken (comments and blank lines are skipped). Options (`-r`,
//! `-e`, `--index-url`, ...) would change what uv reads beyond one requirement, so a line with
//! one is an error naming the file and line, pointing at the `airlock.toml` keys that say the
//! same; never silently dropped, since a dropped requirement surfaces only as an import error.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;
use crate::requirement;

/// The file read.
pub const REQUIREMENTS_TXT: &str = "requirements.txt";

/// A line that is not a requirement: `(line number, why)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    pub line: usize,
    pub text: String,
    pub why: &'static str,
}

/// The requirements in `text`, in order.
pub fn parse(text: &str) -> Result<Vec<String>, BadLine> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        // pip's rule: `#` starts a comment at the line's start or after whitespace.
        let line = match raw.find(" #").or_else(|| raw.find("\t#")) {
            Some(at) => &raw[..at],
            None if raw.trim_start().starts_with('#') => "",
            None => raw,
        }
        .trim();
        if line.is_empty() {
            continue;
        }
        if line.ends_with('\\') {
            return Err(BadLine {
                line: i + 1,
                text: line.to_string(),
                why: "a requirement continued on the next line is not read; write it on one line",
            });
        }
        if let Err(bad) = requirement::check(line) {
            return Err(BadLine {
                line: i + 1,
                text: line.to_string(),
                why: match bad {
                    requirement::BadRequirement::Option => {
                        "options are not read from requirements.txt; list the requirements under \
                         `dependencies` in airlock.toml (with `index-url`, `extra-index-urls` or \
                         `find-links` for other indexes)"
                    }
                    other => other.why(),
                },
            });
        }
        out.push(line.to_string());
    }
    Ok(out)
}

/// The requirements of the pack in `dir` from its `requirements.txt`: `None` when it has none.
pub fn read(pack: &str, dir: &Path) -> Result<Option<(PathBuf, Vec<String>)>, ConfigError> {
    let file = dir.join(REQUIREMENTS_TXT);
    let text = match fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ConfigError::Read {
                pack: pack.to_string(),
                file,
                source,
            });
        }
    };
    match parse(&text) {
        Ok(reqs) => Ok(Some((file, reqs))),
        Err(bad) => Err(ConfigError::Syntax {
            pack: pack.to_string(),
            file,
            line: bad.line,
            message: format!("`{}`: {}", bad.text, bad.why),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_requirements_and_skips_comments() {
        let text = "# core\ntorch>=2.0\nopencv-python  # for masks\n\n  numpy<2 ; python_version < \"3.12\"\n\
                    pkg @ https://example.org/pkg-1.0.tar.gz#sha256=ab\n";
        assert_eq!(
            parse(text).unwrap(),
            [
                "torch>=2.0",
                "opencv-python",
                "numpy<2 ; python_version < \"3.12\"",
                "pkg @ https://example.org/pkg-1.0.tar.gz#sha256=ab",
            ]
        );
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn options_are_errors_with_their_line() {
        for (text, line) in [
            ("torch\n-r other.txt\n", 2),
            ("--extra-index-url https://x\n", 1),
            ("\n\n-e .\n", 3),
            ("pkg \\\n  >=1\n", 1),
        ] {
            let bad = parse(text).unwrap_err();
            assert_eq!(bad.line, line, "{text:?}");
        }
        assert!(
            parse("-r x.txt\n")
                .unwrap_err()
                .why
                .contains("`dependencies` in airlock.toml")
        );
    }

    #[test]
    fn read_names_the_pack_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        assert!(read("p", d.path()).unwrap().is_none());
        fs::write(d.path().join(REQUIREMENTS_TXT), "six\n").unwrap();
        let (file, reqs) = read("p", d.path()).unwrap().unwrap();
        assert_eq!(reqs, ["six"]);
        assert!(file.ends_with(REQUIREMENTS_TXT));
        fs::write(d.path().join(REQUIREMENTS_TXT), "six\n--pre\n").unwrap();
        let msg = read("p", d.path()).unwrap_err().to_string();
        assert!(msg.starts_with("p: "), "{msg}");
        assert!(
            msg.contains("requirements.txt:2: `--pre`: options"),
            "{msg}"
        );
    }
}
