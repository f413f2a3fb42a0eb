//! A simulated card's identity: a random UUID in NVML's spelling (`GPU-` and 32 hex digits in
//! the 8-4-4-4-12 pattern), or one the test gives, checked to fit the card's header.

use crate::error::SimError;
use crate::layout::UUID_MAX;

/// A fresh random UUID in NVML's spelling, for a new simulated card.
pub fn new_uuid() -> String {
    let mut b = [0u8; 16];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
        // No getrandom: time and pid still make cards made apart distinct.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
    }
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Checks a UUID given for a new card.
pub fn check_uuid(uuid: &str) -> Result<(), SimError> {
    let ok = (uuid.starts_with("GPU-") || uuid.starts_with("MIG-"))
        && uuid.len() <= UUID_MAX
        && uuid.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(SimError::InvalidUuid {
            uuid: uuid.to_owned(),
            max: UUID_MAX,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_uuids_are_well_formed_and_distinct() {
        let (a, b) = (new_uuid(), new_uuid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 40);
        check_uuid(&a).unwrap();
    }
}
