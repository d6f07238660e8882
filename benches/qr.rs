//! The QR code of a provisioning (criterion): `cargo bench --bench qr` (figures in README.md).
//!
//! Every provisioning answer carries its LPA as a PNG data URL (spec: `qr_code`), drawn
//! when the answer is rendered. Measured apart: the module grid alone (`fast_qr`, as the
//! service uses it) and the whole data URL (grid, 1-bit PNG, base64), for a real LPA.

use criterion::{criterion_group, criterion_main, Criterion};
use esim_engine::codes::{lpa_string, matching_id, qr_png_data_url};
use std::hint::black_box;

fn qr(c: &mut Criterion) {
    let lpa = lpa_string(&matching_id([0x5A; 16]));
    let url = qr_png_data_url(&lpa).expect("an LPA fits");
    eprintln!("LPA {} chars; data URL {} chars", lpa.len(), url.len());
    let mut group = c.benchmark_group("qr");
    group.bench_function("grid_fast_qr", |b| {
        b.iter(|| fast_qr::QRBuilder::new(black_box(lpa.as_str())).ecl(fast_qr::ECL::M).build().expect("fits"))
    });
    group.bench_function("png_data_url", |b| b.iter(|| qr_png_data_url(black_box(&lpa)).expect("fits")));
    group.finish();
}

criterion_group!(benches, qr);
criterion_main!(benches);
