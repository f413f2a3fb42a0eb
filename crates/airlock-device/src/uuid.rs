//! Device identity. CUDA and NVML enumerate devices in different orders, but agree on UUIDs:
//! NVML spells them `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (or `MIG-...`), torch's
//! `get_device_properties(i).uuid` prints the same hex without the prefix.

use crate::error::SimError;
use crate::layout::UUID_MAX;

/// A UUID in NVML's spelling: `GPU-` is added when the prefix is missing (torch's form).
pub fn normalize_uuid(uuid: &str) -> String {
    let u = uuid.trim();
    if u.starts_with("GPU-") || u.starts_with("MIG-") {
        u.to_owned()
    } else {
        format!("GPU-{u}")
    }
}

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
    fn torch_spelling_gets_the_prefix() {
        let u = "5a1c0b2e-0000-1111-2222-333344445555";
        assert_eq!(normalize_uuid(u), format!("GPU-{u}"));
        assert_eq!(normalize_uuid(&format!("GPU-{u}")), format!("GPU-{u}"));
        assert_eq!(normalize_uuid("MIG-abc"), "MIG-abc");
    }

    #[test]
    fn new_uuids_are_well_formed_and_distinct() {
        let (a, b) = (new_uuid(), new_uuid());
        assert_ne!(a, b);
        assert_eq!(a.len(), 40);
        check_uuid(&a).unwrap();
    }
}
