/// Cheap per-thread xorshift32 generator (haterm uses the same kind): only used for the `r`
/// suffix, where speed matters more than quality.
#[derive(Debug, Clone)]
pub struct Rng(u32);

impl Rng {
    /// A zero seed would stick at zero; it is replaced by a fixed odd constant.
    pub fn new(seed: u32) -> Self {
        Rng(if seed == 0 { 0x9E37_79B9 } else { seed })
    }

    /// Seeded from the clock and the address of a stack variable: different per thread and per process.
    pub fn from_entropy() -> Self {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let local = 0u8;
        let addr = &local as *const u8 as u64;
        let mixed = t ^ addr.rotate_left(29) ^ (std::process::id() as u64).rotate_left(47);
        Rng::new((mixed ^ (mixed >> 32)) as u32)
    }

    /// Uniform on [1, 2^32 - 1].
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }
}
