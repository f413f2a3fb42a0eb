//! What a pack asks of conda: channels, package specs, system requirements.

use std::path::PathBuf;

use rattler_conda_types::{MatchSpec, ParseStrictness};

use crate::error::CondaError;
use crate::system::SystemRequirements;

/// A conda environment to solve for the running platform.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CondaRequest {
    /// Channels in priority order, as written (names, URLs or folders). Empty: conda-forge.
    pub channels: Vec<String>,
    pub specs: Vec<CondaSpec>,
    pub system: SystemRequirements,
    /// The folder relative channel folders are read against (the pack's).
    pub root_dir: PathBuf,
}

/// One conda dependency, as pixi writes it: `name = "spec"` or `name = { version, build,
/// channel }`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CondaSpec {
    pub name: String,
    /// A version spec (`*`, `>=1.2,<2`, `1.2.*`); a bare version means exactly it.
    pub version: String,
    pub build: Option<String>,
    /// The channel it must come from.
    pub channel: Option<String>,
}

impl CondaSpec {
    pub fn new(name: &str, version: &str) -> CondaSpec {
        CondaSpec {
            name: name.to_string(),
            version: version.to_string(),
            build: None,
            channel: None,
        }
    }

    /// The spec as conda's match-spec text, e.g. `pozzettiandrea::bpy >=4.2`.
    pub fn match_spec_text(&self) -> String {
        let mut s = String::new();
        if let Some(c) = &self.channel {
            s.push_str(c);
            s.push_str("::");
        }
        s.push_str(&self.name);
        let v = self.version.trim();
        let v = if v.is_empty() { "*" } else { v };
        let bare = v.starts_with(|c: char| c.is_ascii_digit()) && !v.contains(['*', ',', '|']);
        s.push(' ');
        if bare {
            s.push_str("==");
        }
        s.push_str(v);
        if let Some(b) = &self.build {
            s.push(' ');
            s.push_str(b);
        }
        s
    }

    pub(crate) fn match_spec(&self) -> Result<MatchSpec, CondaError> {
        let text = self.match_spec_text();
        MatchSpec::from_str(&text, ParseStrictness::Lenient).map_err(|e| CondaError::BadSpec {
            spec: text,
            why: e.to_string(),
        })
    }
}

impl CondaRequest {
    /// The channels to read, in priority order: the listed ones (conda-forge when none), then
    /// any a spec names that the list lacks.
    pub fn all_channels(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let listed = if self.channels.is_empty() {
            vec![crate::DEFAULT_CHANNEL.to_string()]
        } else {
            self.channels.clone()
        };
        for c in listed
            .into_iter()
            .chain(self.specs.iter().filter_map(|s| s.channel.clone()))
        {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }

    /// The names of the packages that could come from `channel` (those that name no channel,
    /// or name this one), for messages.
    pub fn packages_from(&self, channel: &str) -> Vec<String> {
        self.specs
            .iter()
            .filter(|s| s.channel.as_deref().is_none_or(|c| c == channel))
            .map(|s| s.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn match_spec_text_follows_pixi() {
        let t = |v: &str| CondaSpec::new("numpy", v).match_spec_text();
        assert_eq!(t("*"), "numpy *");
        assert_eq!(t(""), "numpy *");
        assert_eq!(t("1.26.4"), "numpy ==1.26.4");
        assert_eq!(t("1.26.*"), "numpy 1.26.*");
        assert_eq!(t(">=1.11,<1.17"), "numpy >=1.11,<1.17");
        let mut s = CondaSpec::new("bpy", "*");
        s.channel = Some("pozzettiandrea".into());
        s.build = Some("py311*".into());
        assert_eq!(s.match_spec_text(), "pozzettiandrea::bpy * py311*");
        assert!(s.match_spec().is_ok());
        assert!(CondaSpec::new("x", ">>1").match_spec().is_err());
    }

    #[test]
    fn channels_and_who_could_come_from_them() {
        let mut r = CondaRequest::default();
        assert_eq!(r.all_channels(), ["conda-forge"]);
        r.channels = vec!["conda-forge".into(), "pozzettiandrea".into()];
        let mut bpy = CondaSpec::new("bpy", "*");
        bpy.channel = Some("extra".into());
        r.specs = vec![CondaSpec::new("cgal", "*"), bpy];
        assert_eq!(r.all_channels(), ["conda-forge", "pozzettiandrea", "extra"]);
        assert_eq!(r.packages_from("conda-forge"), ["cgal"]);
        assert_eq!(r.packages_from("extra"), ["cgal", "bpy"]);
    }
}
