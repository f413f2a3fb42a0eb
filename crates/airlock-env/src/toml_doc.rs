//! Reading a TOML file key by key, so that every error carries the line it is about.
//!
//! Serde's `deny_unknown_fields` would report an unknown key only as a message, and a wrong
//! type without the key's name. Walking toml's spanned document ourselves gives each error a
//! typed [`ConfigError`] with the pack, the file, the line and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::error::ConfigError;

pub type Value<'i> = Spanned<DeValue<'i>>;
pub type Table<'i> = DeTable<'i>;

/// One parsed config file, and what errors about it need to say.
pub struct Doc<'a> {
    pub pack: &'a str,
    pub file: &'a Path,
    text: &'a str,
}

impl<'a> Doc<'a> {
    pub fn new(pack: &'a str, file: &'a Path, text: &'a str) -> Self {
        Doc { pack, file, text }
    }

    /// Parses the whole file.
    pub fn parse(&self) -> Result<Table<'a>, ConfigError> {
        match DeTable::parse(self.text) {
            Ok(t) => Ok(t.into_inner()),
            Err(e) => Err(ConfigError::Syntax {
                pack: self.pack.to_string(),
                file: self.file.to_path_buf(),
                line: e.span().map_or(1, |s| self.line(s.start)),
                message: e.message().trim().to_string(),
            }),
        }
    }

    /// The 1-based line of a byte offset.
    pub fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    pub fn line_of<T>(&self, s: &Spanned<T>) -> usize {
        self.line(s.span().start)
    }

    fn pack_name(&self) -> String {
        self.pack.to_string()
    }

    fn file(&self) -> PathBuf {
        self.file.to_path_buf()
    }

    pub fn unknown_key(&self, key: &Spanned<impl AsRef<str>>, table: Option<&str>) -> ConfigError {
        ConfigError::UnknownKey {
            pack: self.pack_name(),
            file: self.file(),
            line: self.line_of(key),
            key: key.get_ref().as_ref().to_string(),
            table: table.map(str::to_string),
        }
    }

    pub fn wrong_type(&self, key: &str, v: &Value<'_>, expected: &'static str) -> ConfigError {
        ConfigError::WrongType {
            pack: self.pack_name(),
            file: self.file(),
            line: self.line_of(v),
            key: key.to_string(),
            expected,
            found: v.get_ref().type_str(),
        }
    }

    pub fn invalid(&self, key: &str, v: &Value<'_>, value: &str, why: &'static str) -> ConfigError {
        ConfigError::InvalidValue {
            pack: self.pack_name(),
            file: self.file(),
            line: self.line_of(v),
            key: key.to_string(),
            value: value.to_string(),
            why,
        }
    }

    pub fn string(&self, key: &str, v: &Value<'_>) -> Result<String, ConfigError> {
        match v.get_ref() {
            DeValue::String(s) => Ok(s.to_string()),
            _ => Err(self.wrong_type(key, v, "a string")),
        }
    }

    /// A string that must not be empty or blank.
    pub fn nonempty(&self, key: &str, v: &Value<'_>) -> Result<String, ConfigError> {
        let s = self.string(key, v)?;
        if s.trim().is_empty() {
            return Err(self.invalid(key, v, &s, "must not be empty"));
        }
        Ok(s.trim().to_string())
    }

    pub fn bool(&self, key: &str, v: &Value<'_>) -> Result<bool, ConfigError> {
        match v.get_ref() {
            DeValue::Boolean(b) => Ok(*b),
            _ => Err(self.wrong_type(key, v, "true or false")),
        }
    }

    /// An array of items, each checked by `item`.
    pub fn array<T>(
        &self,
        key: &str,
        v: &Value<'_>,
        mut item: impl FnMut(&Value<'_>) -> Result<T, ConfigError>,
    ) -> Result<Vec<T>, ConfigError> {
        match v.get_ref() {
            DeValue::Array(a) => a.iter().map(&mut item).collect(),
            _ => Err(self.wrong_type(key, v, "an array")),
        }
    }

    pub fn string_array(&self, key: &str, v: &Value<'_>) -> Result<Vec<String>, ConfigError> {
        self.array(key, v, |i| match i.get_ref() {
            DeValue::String(_) => self.nonempty(key, i),
            _ => Err(self.wrong_type(key, i, "an array of strings")),
        })
    }

    pub fn table<'t>(&self, key: &str, v: &'t Value<'a>) -> Result<&'t Table<'a>, ConfigError> {
        match v.get_ref() {
            DeValue::Table(t) => Ok(t),
            _ => Err(self.wrong_type(key, v, "a table")),
        }
    }

    /// The entries of the table at `key` in file order, each with its name and its full key
    /// (`key.name`, what errors about it say).
    pub fn entries<'t>(
        &self,
        key: &str,
        v: &'t Value<'a>,
    ) -> Result<Vec<(&'t str, String, &'t Value<'a>)>, ConfigError> {
        Ok(sorted(self.table(key, v)?)
            .into_iter()
            .map(|(k, val)| {
                let name = k.get_ref().as_ref();
                (name, format!("{key}.{name}"), val)
            })
            .collect())
    }

    /// `[env_vars]`: a table of strings, names that can be set in a process environment.
    pub fn env_vars(
        &self,
        key: &str,
        v: &Value<'a>,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        let mut out = BTreeMap::new();
        for (k, val) in sorted(self.table(key, v)?) {
            let name = k.get_ref().to_string();
            let full = format!("{key}.{name}");
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(self.invalid(
                    &full,
                    val,
                    &name,
                    "not a valid environment variable name",
                ));
            }
            let value = match val.get_ref() {
                DeValue::String(s) => s.to_string(),
                _ => return Err(self.wrong_type(&full, val, "a string")),
            };
            if value.contains('\0') {
                return Err(self.invalid(&full, val, &value, "must not contain NUL"));
            }
            out.insert(name, value);
        }
        Ok(out)
    }
}

/// A table's entries in file order (toml keeps them sorted by name), so the first error
/// reported is the first one in the file.
pub fn sorted<'t, 'i>(
    t: &'t Table<'i>,
) -> Vec<(&'t Spanned<std::borrow::Cow<'i, str>>, &'t Value<'i>)> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}
