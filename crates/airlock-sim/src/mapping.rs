//! A whole-file shared read-write mapping, unmapped on drop.

use std::os::fd::AsFd;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

use crate::layout::{Header, Proc, Slot};

#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is shared memory whose mutable parts are all atomics.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `file` shared (MAP_SHARED: every process mapping the file sees the
    /// same pages).
    pub fn new(file: &impl AsFd, len: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh mapping, owned by the returned value until drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                file.as_fd(),
                0,
            )?
        };
        let ptr =
            NonNull::new(ptr.cast()).ok_or_else(|| std::io::Error::other("mmap gave null"))?;
        Ok(Mapping { ptr, len })
    }

    /// The header at the start of the mapping.
    ///
    /// # Safety
    /// The mapping must be at least a header long; its non-atomic fields must not change
    /// while the reference lives (they are written only before a card's file is published).
    pub unsafe fn header(&self) -> &Header {
        // SAFETY: page-aligned, long enough (caller), and every bit pattern is a valid Header.
        unsafe { &*self.ptr.as_ptr().cast::<Header>() }
    }

    /// Writes a header at the start of a mapping nobody else has yet.
    ///
    /// # Safety
    /// As for [`Mapping::header`], and no other reference to the header may exist.
    pub unsafe fn write_header(&self, header: Header) {
        // SAFETY: the caller's contract.
        unsafe { self.ptr.as_ptr().cast::<Header>().write(header) }
    }

    /// The `count` slots after the header.
    ///
    /// # Safety
    /// The mapping must hold a header and `count` slots.
    pub unsafe fn slots(&self, count: usize) -> &[Slot] {
        // SAFETY: slots are 128-byte aligned after a 256-byte header on a page-aligned base,
        // in bounds (caller), made only of atomics, and every bit pattern is valid.
        unsafe {
            let first = self.ptr.as_ptr().add(size_of::<Header>()).cast::<Slot>();
            std::slice::from_raw_parts(first, count)
        }
    }

    /// The `count` process records after a header and `slots` slots.
    ///
    /// # Safety
    /// The mapping must hold a header, `slots` slots and `count` records.
    pub unsafe fn procs(&self, slots: usize, count: usize) -> &[Proc] {
        // SAFETY: records are 64-byte aligned after the 128-byte slots, in bounds (caller),
        // made only of atomics, and every bit pattern is valid.
        unsafe {
            let first = self
                .ptr
                .as_ptr()
                .add(size_of::<Header>() + slots * size_of::<Slot>())
                .cast::<Proc>();
            std::slice::from_raw_parts(first, count)
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no reference outlives `self`.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
