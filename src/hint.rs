//! Cache hints: one of the crate's two `unsafe` modules (an instruction that only tells the CPU
//! what memory is about to be written; the other is `shared::small_task`). Imports only `sync`.
//!
//! A producer appends each new timeout to its shard's batch, in buffers the worker read (on its
//! own core) when it last took a batch. Each store into such a line waits for the other core's
//! copy to be invalidated, and the shard unlock's locked exchange waits for every store before
//! it, which on a host whose two cores are far apart is most of `new_timeout`'s cost
//! (`benches/README.md`, "Known limits"). Asking for the line in the writable state a few
//! entries ahead (`prefetchw`) takes that wait off the path.
//!
//! The instructions are emitted where `cfg_prefetch!` holds (x86-64, not under loom, Miri or
//! SGX); elsewhere both functions do nothing. Sources: Intel's SDM, vol. 2, "PREFETCHW" and
//! "PREFETCHh"; AMD's APM, vol. 3, "PREFETCHW"; CPUID leaf `0x8000_0001`, ECX bit 8.
#![allow(unsafe_code)]

pub(crate) use imp::{prefetch, prefetch_write_ahead};

/// What the caller of [`prefetch`] is about to do with the line.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    /// Read it: the line is fetched shared.
    Read,
    /// Write it: the line is fetched writable, where the CPU can.
    Write,
}

cfg_prefetch! {
    mod imp {
        use super::Access;
        use crate::sync::AtomicU8;
        use std::sync::atomic::Ordering;

        /// How far ahead of the next write [`prefetch_write_ahead`] asks for: four cache lines, so
        /// the line is owned before the producer reaches it at tens of nanoseconds a call.
        const AHEAD_BYTES: usize = 256;

        /// Asks the CPU to fetch, for writing, the cache line `AHEAD_BYTES` past where `vec`'s next
        /// push goes, if that is still inside its buffer. Only a hint: it changes no memory and no
        /// result. It does nothing on CPUs without `prefetchw`, on other architectures, and under
        /// loom, Miri and SGX (no inline assembly or no CPUID there).
        #[inline(always)]
        pub(crate) fn prefetch_write_ahead<T>(vec: &Vec<T>) {
            let size = std::mem::size_of::<T>();
            if size == 0 {
                return;
            }
            let ahead = vec.len() + AHEAD_BYTES.div_ceil(size);
            if ahead < vec.capacity() && has_prefetchw() {
                let addr = vec.as_ptr().wrapping_add(ahead);
                // SAFETY: `prefetchw` is a hint: it neither reads nor writes memory as the program
                // sees it and never faults, whatever the address; the address is inside `vec`'s
                // buffer all the same. It runs only where CPUID reports it (`prfchw`), so it
                // cannot be an undefined opcode. It uses no stack and leaves the flags as they
                // were, as the options say.
                unsafe {
                    std::arch::asm!(
                        "prefetchw [{addr}]",
                        addr = in(reg) addr,
                        options(nostack, preserves_flags, readonly)
                    );
                }
            }
        }

        /// Asks the CPU to fetch the cache line at `ptr`: for writing (`prefetchw`) for
        /// [`Access::Write`] when the CPU has it, else for reading (`prefetcht0`). Only a hint,
        /// as [`prefetch_write_ahead`]; the worker asks for the lines of the timeouts it is
        /// about to expire (their cells and tasks), a few timeouts ahead.
        #[inline(always)]
        pub(crate) fn prefetch<T>(ptr: *const T, access: Access) {
            if access == Access::Write && has_prefetchw() {
                // SAFETY: as in `prefetch_write_ahead`: a hint that never faults, whatever the
                // address, and runs only where CPUID reports it.
                unsafe {
                    std::arch::asm!(
                        "prefetchw [{addr}]",
                        addr = in(reg) ptr,
                        options(nostack, preserves_flags, readonly)
                    );
                }
            } else {
                // SAFETY: `prefetcht0` (SSE, on every x86-64 CPU) is a hint as well: it reads
                // nothing the program sees and never faults, whatever the address.
                unsafe {
                    std::arch::asm!(
                        "prefetcht0 [{addr}]",
                        addr = in(reg) ptr,
                        options(nostack, preserves_flags, readonly)
                    );
                }
            }
        }

        /// Whether this CPU has `prefetchw`: CPUID once, then a cached answer (0 not asked yet, 1
        /// no, 2 yes). Every x86-64 CPU of AMD has it, Intel's from Broadwell on.
        #[inline(always)]
        fn has_prefetchw() -> bool {
            static ANSWER: AtomicU8 = AtomicU8::new(0);
            // Relaxed: the answer is the same whichever thread computes it, and nothing else is
            // published with it.
            match ANSWER.load(Ordering::Relaxed) {
                0 => {
                    // SAFETY: CPUID exists on every x86-64 CPU and only reads identification
                    // registers (an `unsafe` call before Rust 1.89, a safe one after).
                    #[allow(unused_unsafe)]
                    let ids = unsafe { std::arch::x86_64::__cpuid(0x8000_0001) };
                    // ECX bit 8: PRFCHW (3DNowPrefetch), the `prefetchw` instruction.
                    let has = ids.ecx & (1 << 8) != 0;
                    ANSWER.store(if has { 2 } else { 1 }, Ordering::Relaxed);
                    has
                }
                answer => answer == 2,
            }
        }
    }
}

cfg_not_prefetch! {
    mod imp {
        use super::Access;

        /// Nothing to ask for on this target.
        #[inline(always)]
        pub(crate) fn prefetch_write_ahead<T>(_vec: &Vec<T>) {}

        /// Nothing to ask for on this target.
        #[inline(always)]
        pub(crate) fn prefetch<T>(_ptr: *const T, _access: Access) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_changes_nothing_at_any_length() {
        // Every length from empty to full, for sizes that make the look-ahead land inside the
        // buffer, on its last element and past its end: the contents are what was pushed.
        for capacity in [0usize, 1, 7, 32, 33, 64, 1000] {
            let mut bytes: Vec<u8> = Vec::with_capacity(capacity);
            let mut words: Vec<[u64; 3]> = Vec::with_capacity(capacity);
            let mut units: Vec<()> = Vec::with_capacity(capacity);
            for i in 0..capacity + 3 {
                prefetch_write_ahead(&bytes);
                prefetch_write_ahead(&words);
                prefetch_write_ahead(&units);
                bytes.push(i as u8);
                words.push([i as u64; 3]);
                units.push(());
            }
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
            assert!(words.iter().enumerate().all(|(i, w)| *w == [i as u64; 3]));
            assert_eq!(units.len(), capacity + 3);
        }
    }
}
