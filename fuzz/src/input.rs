//! The fuzzer's bytes read as a stream of choices. Every read takes from what is left and
//! gets zeros once the input runs out, so every input is a valid program: the fuzzer's
//! mutations change choices, never the validity of the input.

/// A cursor over the input.
#[derive(Debug)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Whether every byte was taken.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        out
    }

    pub fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }

    /// A number in `0..n` (`n > 0`), from one byte when `n` fits in one, else four.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        if n <= 256 {
            u64::from(self.u8()) % n
        } else {
            u64::from(self.u32()) % n
        }
    }

    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len() as u64) as usize]
    }
}
