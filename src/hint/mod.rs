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
//! SGX); elsewhere `WriteAhead::get` is always `None`. Sources: Intel's SDM, vol. 2, "PREFETCHW";
//! AMD's APM, vol. 3, "PREFETCHW"; CPUID leaf `0x8000_0001`, ECX bit 8.
#![allow(unsafe_code)]

pub(crate) use imp::WriteAhead;

cfg_prefetch! {
    mod x86;
    use x86 as imp;
}

cfg_not_prefetch! {
    mod imp {
        /// Never had on this target: nothing to ask for.
        #[derive(Clone, Copy, Debug)]
        pub(crate) struct WriteAhead(());

        impl WriteAhead {
            /// Always `None` here.
            #[inline(always)]
            pub(crate) fn get() -> Option<WriteAhead> {
                None
            }

            /// Unreachable: no `WriteAhead` exists on this target.
            #[inline(always)]
            pub(crate) fn ahead<T>(self, _vec: &Vec<T>) {}
        }
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
                if let Some(hint) = WriteAhead::get() {
                    hint.ahead(&bytes);
                    hint.ahead(&words);
                    hint.ahead(&units);
                }
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
