//! Declares the `loom` cfg (set through RUSTFLAGS by scripts/loom.sh) so that rustc's
//! unexpected-cfg check knows it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
