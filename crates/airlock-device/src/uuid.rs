//! Device identity. CUDA and NVML enumerate devices in different orders, but agree on UUIDs:
//! NVML spells them `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (or `MIG-...`), torch's
//! `get_device_properties(i).uuid` prints the same hex without the prefix.

/// A UUID in NVML's spelling: `GPU-` is added when the prefix is missing (torch's form).
pub fn normalize_uuid(uuid: &str) -> String {
    let u = uuid.trim();
    if u.starts_with("GPU-") || u.starts_with("MIG-") {
        u.to_owned()
    } else {
        format!("GPU-{u}")
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
}
