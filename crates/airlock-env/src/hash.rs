//! Content hashes: SHA-256 over named, length-prefixed fields.
//!
//! Length prefixes keep field boundaries unambiguous (`["ab", "c"]` and `["a", "bc"]` hash
//! differently), and a domain string at the start keeps an inputs hash from ever equalling an
//! env key. Changing what goes into a hash means changing its domain's version suffix.

use sha2::{Digest, Sha256};

/// A SHA-256 being fed fields.
pub struct ContentHash(Sha256);

impl ContentHash {
    pub fn new(domain: &str) -> Self {
        let mut h = ContentHash(Sha256::new());
        h.field("domain", domain);
        h
    }

    pub fn field(&mut self, name: &str, value: &str) -> &mut Self {
        for part in [name, value] {
            self.0.update((part.len() as u64).to_le_bytes());
            self.0.update(part.as_bytes());
        }
        self
    }

    pub fn opt(&mut self, name: &str, value: Option<&str>) -> &mut Self {
        match value {
            Some(v) => self.field(name, v),
            None => self.field(&format!("{name}:none"), ""),
        }
    }

    pub fn list<S: AsRef<str>>(&mut self, name: &str, values: &[S]) -> &mut Self {
        self.field(name, &values.len().to_string());
        for v in values {
            self.field(name, v.as_ref());
        }
        self
    }

    /// The hash as lowercase hex, 64 characters.
    pub fn hex(&self) -> String {
        self.0
            .clone()
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// SHA-256 of bytes as hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_unambiguous() {
        let a = ContentHash::new("t").list("x", &["ab", "c"]).hex();
        let b = ContentHash::new("t").list("x", &["a", "bc"]).hex();
        assert_ne!(a, b);
        assert_ne!(ContentHash::new("t").hex(), ContentHash::new("u").hex());
        assert_ne!(
            ContentHash::new("t").opt("p", None).hex(),
            ContentHash::new("t").opt("p", Some("")).hex()
        );
        assert_eq!(a.len(), 64);
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
