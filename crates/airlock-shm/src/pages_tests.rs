use super::*;
use crate::Segment;

/// These interfaces need Linux 6.7; on an older kernel the answers are "cannot tell", which
/// is what `supported_or_cannot_tell` checks instead.
fn supported() -> bool {
    write_watch_supported()
}

#[test]
fn supported_or_cannot_tell() {
    let buf = vec![1u8; 1 << 20];
    let w = unsafe { WriteWatch::new(buf.as_ptr() as usize, buf.len()) };
    assert_eq!(w.is_some(), supported());
}

#[test]
fn a_write_by_any_route_is_seen_once_and_the_watch_rearms() {
    if !supported() {
        return;
    }
    let mut buf = vec![1u8; 4 << 20];
    let (addr, len) = (buf.as_ptr() as usize + 100, 3 << 20);
    let mut w = unsafe { WriteWatch::new(addr, len) }.expect("private memory is watchable");
    let mut unchanged = || unsafe { w.unchanged() };
    assert!(unchanged());
    assert!(unchanged(), "looking does not count as a write");
    // A raw pointer write, as ctypes.memset on a data_ptr would.
    unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(2 << 20), 9) };
    assert!(!unchanged());
    assert!(unchanged(), "re-armed by the false answer");
    // The kernel writing into it (read(2) into the buffer).
    let zero = File::open("/dev/zero").unwrap();
    let dst = unsafe { buf.as_mut_ptr().add(1 << 20) };
    assert_eq!(unsafe { libc::read(zero.as_raw_fd(), dst.cast(), 16) }, 16);
    assert!(!unchanged());
    // Another thread.
    let p = buf.as_mut_ptr() as usize + (3 << 20);
    std::thread::spawn(move || unsafe { std::ptr::write_volatile(p as *mut u8, 3) })
        .join()
        .unwrap();
    assert!(!unchanged());
    assert!(unchanged());
    // The partial pages at the ends: a write inside the range is seen, one next to it
    // (an allocator's bookkeeping) is not.
    unsafe { std::ptr::write_volatile((addr + 1) as *mut u8, 4) };
    assert!(!unchanged());
    unsafe { std::ptr::write_volatile((addr - 1) as *mut u8, 4) };
    unsafe { std::ptr::write_volatile((addr + len) as *mut u8, 4) };
    assert!(
        unchanged(),
        "a neighbour's write on a shared page is not ours"
    );
    unsafe { std::ptr::write_volatile((addr + len - 1) as *mut u8, 4) };
    assert!(!unchanged());
    drop(w);
    buf[0] = 2; // unwatched again: an ordinary write
}

#[test]
fn dropped_pages_count_as_changed() {
    if !supported() {
        return;
    }
    let mut buf = vec![1u8; 4 << 20];
    let lo = (buf.as_mut_ptr() as usize).next_multiple_of(PAGE);
    let mut w = unsafe { WriteWatch::new(lo, 2 << 20) }.unwrap();
    // MADV_DONTNEED makes the page read back as zeros without a write.
    unsafe { libc::madvise((lo + PAGE) as *mut libc::c_void, PAGE, libc::MADV_DONTNEED) };
    assert!(!unsafe { w.unchanged() });
}

#[test]
fn shared_memory_is_never_watched() {
    // Another process could write it without touching our page tables.
    let seg = Segment::create("airlock-test", 4 << 20).unwrap();
    let base = seg.base().unwrap() as usize;
    assert!(unsafe { WriteWatch::new(base, 1 << 20) }.is_none());
}

#[test]
fn private_pages_are_those_written_through_a_private_mapping() {
    if !supported() {
        return;
    }
    let len = 4 << 20;
    let seg = Segment::create("airlock-test", len as u64).unwrap();
    let p = private_mapping(&seg, len);
    assert_eq!(private_pages(p, len), Some(vec![]), "never touched");
    let _ = unsafe { std::ptr::read_volatile((p + 5 * PAGE) as *const u8) };
    assert_eq!(
        private_pages(p, len),
        Some(vec![]),
        "read: the file's own page"
    );
    unsafe { std::ptr::write_volatile((p + 7 * PAGE + 3) as *mut u8, 1) };
    assert_eq!(
        private_pages(p, len),
        Some(vec![(p + 7 * PAGE, p + 8 * PAGE)])
    );
    assert_eq!(
        private_pages(p, 7 * PAGE),
        Some(vec![]),
        "outside the range asked"
    );
    unsafe { rustix::mm::munmap(p as *mut _, len).unwrap() };
}

/// A private mapping of a fresh shared segment of `len` bytes (unmapped by the caller).
fn private_mapping(seg: &Segment, len: usize) -> usize {
    (unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE,
            seg.fd(),
            0,
        )
    })
    .unwrap() as usize
}

#[test]
fn an_armed_private_mapping_reports_the_same_copies_as_the_walk_of_one_not_armed() {
    if !supported() || !with_kernel(|k| k.fast_written) {
        return;
    }
    let len = 4 << 20;
    let seg = Segment::create("airlock-test", len as u64).unwrap();
    // The same things happen to both mappings; `armed` is asked with the written-only scan,
    // `walked` is walked page by page (where armed, markers read as swapped entries).
    let (armed, walked) = (private_mapping(&seg, len), private_mapping(&seg, len));
    assert!(!private_watched(armed, len));
    assert!(
        unsafe { watch_private(armed, len) },
        "a private shmem mapping can be armed"
    );
    assert!(private_watched(armed, len) && !private_watched(walked, len));
    let rel = |v: Vec<(usize, usize)>, base: usize| -> Vec<(usize, usize)> {
        v.into_iter()
            .map(|(a, b)| ((a - base) / PAGE, (b - base) / PAGE))
            .collect()
    };
    let both = |what: &str| {
        let fast = private_pages(armed, len).expect("armed: the fast scan answers");
        let walk = with_kernel(|k| copied_pages(k.pagemap.as_ref()?, (walked, walked + len)));
        let fast = rel(fast, armed);
        assert_eq!(fast, rel(walk.unwrap(), walked), "{what}");
        fast
    };
    let each = |f: &dyn Fn(usize)| {
        f(armed);
        f(walked);
    };
    assert_eq!(both("untouched"), vec![]);
    each(&|p| {
        let _ = unsafe { std::ptr::read_volatile((p + 5 * PAGE) as *const u8) };
    });
    assert_eq!(both("one page read in: the file's own"), vec![]);
    each(&|p| unsafe {
        libc::madvise(p as *mut libc::c_void, len / 2, libc::MADV_POPULATE_READ);
    });
    assert_eq!(both("half of it read in"), vec![]);
    each(&|p| unsafe {
        std::ptr::write_volatile((p + 7 * PAGE + 3) as *mut u8, 1);
        std::ptr::write_volatile((p + 900 * PAGE) as *mut u8, 1);
    });
    assert_eq!(both("two bytes written"), vec![(7, 8), (900, 901)]);
    each(&|p| unsafe { std::ptr::write_volatile((p + 1000 * PAGE) as *mut u8, 1) });
    assert_eq!(
        both("a page never read, written"),
        vec![(7, 8), (900, 901), (1000, 1001)]
    );
    // A dropped copy's entry is empty: it reads as written until armed again.
    each(&|p| unsafe {
        libc::madvise(
            (p + 7 * PAGE) as *mut libc::c_void,
            PAGE,
            libc::MADV_DONTNEED,
        );
    });
    let page7 = armed + 7 * PAGE;
    assert_eq!(
        private_pages(page7, PAGE),
        Some(vec![(page7, page7 + PAGE)])
    );
    assert!(unsafe { watch_private(page7, PAGE) });
    assert_eq!(
        both("a copy dropped, armed again"),
        vec![(900, 901), (1000, 1001)]
    );
    each(&|p| {
        let _ = unsafe { std::ptr::read_volatile((p + 7 * PAGE) as *const u8) };
    });
    assert_eq!(both("read in again"), vec![(900, 901), (1000, 1001)]);
    unsafe {
        rustix::mm::munmap(armed as *mut _, len).unwrap();
        rustix::mm::munmap(walked as *mut _, len).unwrap();
    }
}

#[test]
fn a_private_mapping_not_armed_is_walked() {
    if !supported() {
        return;
    }
    let len = 1 << 20;
    let seg = Segment::create("airlock-test", len as u64).unwrap();
    let p = private_mapping(&seg, len);
    let q = private_mapping(&seg, len);
    unsafe { watch_private(q, len) };
    unsafe { std::ptr::write_volatile((p + 3 * PAGE) as *mut u8, 1) };
    let copy = Some(vec![(p + 3 * PAGE, p + 4 * PAGE)]);
    assert_eq!(private_pages(p, len), copy, "never armed");
    assert_eq!(
        written_pages_of(p, len),
        None,
        "the written-only scan refuses it"
    );
    if with_kernel(|k| k.fast_written) {
        assert_eq!(written_pages_of(q, len), Some(vec![]), "armed, it answers");
    }
    unsafe {
        rustix::mm::munmap(p as *mut _, len).unwrap();
        rustix::mm::munmap(q as *mut _, len).unwrap();
    }
}

fn written_pages_of(addr: usize, len: usize) -> Option<Vec<(usize, usize)>> {
    with_kernel(|k| written_pages(k.pagemap.as_ref()?, page_span(addr, len)))
}

#[test]
fn only_kernels_that_read_a_swapped_entry_right_take_the_fast_path() {
    assert!(written_scan_is_exact("6.18.44-fc-v1098"));
    assert!(written_scan_is_exact("6.10.0"));
    assert!(written_scan_is_exact("7.0.1"));
    assert!(!written_scan_is_exact("6.9.12-200.fc40.x86_64"));
    assert!(!written_scan_is_exact("6.7.0-rc1"));
    assert!(!written_scan_is_exact("5.15.0-91-generic"));
    assert!(!written_scan_is_exact(""));
    assert!(!written_scan_is_exact("unknown"));
}

/// Whether the written-only scan and the full walk report anything in `[lo, hi)`.
fn both_scans(lo: usize, hi: usize) -> (bool, bool) {
    with_kernel(|k| {
        let pagemap = k.pagemap.as_ref().unwrap();
        let mut vec = [PageRegion::default(); 1];
        let a = scan(pagemap, (lo, hi), WRITTEN_ONLY, &mut vec).unwrap().0 > 0;
        let b = scan(pagemap, (lo, hi), WRITTEN_OR_GONE, &mut vec)
            .unwrap()
            .0
            > 0;
        (a, b)
    })
}

#[test]
fn the_written_only_scan_agrees_with_the_full_walk() {
    if !supported() || !with_kernel(|k| k.fast_written) {
        return;
    }
    let mut buf = vec![1u8; 8 << 20];
    let lo = (buf.as_mut_ptr() as usize).next_multiple_of(PAGE);
    let hi = lo + (4 << 20);
    let _w = unsafe { WriteWatch::new(lo, hi - lo) }.unwrap();
    assert_eq!(both_scans(lo, hi), (false, false), "armed, untouched");
    unsafe { std::ptr::write_volatile((lo + 5 * PAGE + 7) as *mut u8, 9) };
    assert_eq!(both_scans(lo, hi), (true, true), "one byte written");
    assert_eq!(
        both_scans(lo, lo + 5 * PAGE),
        (false, false),
        "pages before it"
    );
    unsafe {
        libc::madvise(
            (lo + 9 * PAGE) as *mut libc::c_void,
            PAGE,
            libc::MADV_DONTNEED,
        )
    };
    let dropped = (lo + 9 * PAGE, lo + 10 * PAGE);
    assert_eq!(
        both_scans(dropped.0, dropped.1),
        (true, true),
        "a dropped page"
    );
}
