//! Prints what NVML reports for every device, and what one memory read costs: the check to run
//! on a machine with a GPU (`cargo run --release -p airlock-device --example nvml_probe`).
//! An optional argument names the library (default: `AIRLOCK_NVML_LIBRARY`, else the driver's).

use std::path::Path;
use std::time::Instant;

use airlock_device::Nvml;

fn main() {
    let opened = match std::env::args_os().nth(1) {
        Some(lib) => Nvml::open_at(Path::new(&lib)),
        None => Nvml::open(),
    };
    let nvml = match opened {
        Ok(n) => n,
        Err(e) => {
            println!("NVML unavailable ({}): {e}", e.is_unavailable());
            return;
        }
    };
    println!("library {}", nvml.library());
    let devices = match nvml.devices() {
        Ok(d) => d,
        Err(e) => {
            println!("cannot list devices: {e}");
            return;
        }
    };
    for (i, dev) in devices.iter().enumerate() {
        match dev.info() {
            Ok(info) => println!("{i}: {info:?}"),
            Err(e) => println!("{i}: {e}"),
        }
        let Ok(uuid) = dev.uuid() else { continue };
        let n = 10_000u32;
        let start = Instant::now();
        for _ in 0..n {
            let by = nvml.device_by_uuid(&uuid).and_then(|d| d.memory());
            if let Err(e) = by {
                println!("{i}: by UUID: {e}");
                break;
            }
        }
        println!(
            "{i}: device_by_uuid + memory: {:.2} us per read",
            start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        );
    }
}
