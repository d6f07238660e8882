//! Installation artefacts of a provisioned eSIM: ICCID, matching id, LPA
//! activation string, Apple one-tap install link and a QR code PNG.
//!
//! Everything here is pure and deterministic: no OS randomness, no clock, no
//! floats. Randomness (for the matching id) is handed in by the caller as
//! bytes, so the engine's seeded RNG stays the only source of entropy and a
//! replay reproduces identical artefacts byte for byte.

use std::fmt;

use base64::Engine as _;

/// SM-DP+ address used in LPA strings: the server the device's LPA contacts
/// to download the profile.
pub const SMDP_ADDRESS: &str = "smdp.esim-reseller.example";

/// Prefix of Apple's one-tap eSIM install link (iOS 17.4+); the LPA string is
/// appended as the `carddata` query value.
pub const DIRECT_INSTALL_PREFIX: &str = "https://esimsetup.apple.com/esim_qrcode_provisioning?carddata=";

/// Pixels per QR module in the rendered PNG: small files that still scan
/// reliably from a screen.
pub const QR_MODULE_PIXELS: usize = 4;

/// Light border around the symbol, in modules: the minimum the QR
/// specification requires for reliable detection.
pub const QR_QUIET_ZONE_MODULES: usize = 4;

/// Deflate level of the QR PNG: see [`qr_png_data_url`] for what it costs and saves.
const QR_PNG_COMPRESSION: png::Compression = png::Compression::Fast;

/// Why a QR code data URL could not be produced. Cannot happen for LPA-length
/// text (a QR code at error-correction level M holds up to 2331 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeError {
    /// The text does not fit in any QR code version at error-correction M.
    QrEncode(String),
    /// The PNG encoder rejected the image (not expected for an in-memory buffer).
    Png(String),
}

impl fmt::Display for CodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeError::QrEncode(e) => write!(f, "QR encoding failed: {e}"),
            CodeError::Png(e) => write!(f, "PNG encoding failed: {e}"),
        }
    }
}

impl std::error::Error for CodeError {}

/// Luhn check digit (0..=9) for a string of ASCII digits (the payload without
/// its check digit). ICCIDs carry one so typos are caught on entry.
/// Non-digit characters are skipped (they neither count nor shift positions).
pub fn luhn_check_digit(payload: &str) -> u8 {
    // Walking from the right, the digit next to the (future) check digit is doubled.
    let mut sum: u32 = 0;
    let mut double = true;
    for b in payload.bytes().rev().filter(u8::is_ascii_digit) {
        let mut d = u32::from(b - b'0');
        if double {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
        double = !double;
    }
    ((10 - sum % 10) % 10) as u8
}

/// True when the last digit is the correct Luhn check digit of the rest, so
/// an ICCID (or any Luhn-protected number) can be validated on input.
/// Returns false for fewer than two characters or any non-digit character.
pub fn luhn_valid(number: &str) -> bool {
    if number.len() < 2 || !number.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let (payload, check) = number.split_at(number.len() - 1);
    luhn_check_digit(payload) == check.as_bytes()[0] - b'0'
}

/// The digits of an ICCID (decision 22).
pub const ICCID_DIGITS: usize = 19;

/// An ICCID as the state keeps it: its 19 ASCII digits inline, in the eSIM's record.
/// As a `String` the digits had a heap block of their own: 32 more bytes per eSIM, and
/// one more cache miss on every eSIM read at a million eSIMs (decision 205). Written and
/// shown as its text; only 19 ASCII digits make one.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Iccid([u8; ICCID_DIGITS]);

impl Iccid {
    /// The ICCID `text` is, if it is 19 ASCII digits.
    pub fn parse(text: &str) -> Option<Iccid> {
        let digits: [u8; ICCID_DIGITS] = text.as_bytes().try_into().ok()?;
        digits.iter().all(u8::is_ascii_digit).then_some(Iccid(digits))
    }

    /// Its text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("an ICCID holds ASCII digits only")
    }
}

impl std::ops::Deref for Iccid {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Iccid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Iccid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for Iccid {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Iccid {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Reads the text in place (a snapshot holds one per eSIM: no allocation each).
        struct Digits;
        impl serde::de::Visitor<'_> for Digits {
            type Value = Iccid;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 19-digit ICCID")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Iccid, E> {
                Iccid::parse(text).ok_or_else(|| E::custom(format!("{text:?} is not a 19-digit ICCID")))
            }
        }
        deserializer.deserialize_str(Digits)
    }
}

/// A realistic ICCID, the identifier printed on / reported by the eSIM
/// profile: 19 digits, "89" (telecom industry) + country "44" + issuer "10" +
/// the 12-digit zero-padded decimal of `serial % 10^12` + the Luhn check digit.
/// Distinct serials below 10^12 give distinct ICCIDs.
pub fn iccid_for_serial(serial: u64) -> Iccid {
    const SERIAL_SPACE: u64 = 1_000_000_000_000;
    let payload = format!("894410{:012}", serial % SERIAL_SPACE);
    let check = luhn_check_digit(&payload);
    Iccid::parse(&format!("{payload}{check}")).expect("six digits, twelve and a check digit")
}

/// Matching id (the activation code the SM-DP+ uses to find the profile):
/// 25 uppercase alphanumerics `[0-9A-Z]` in 5 groups of 5 separated by '-',
/// e.g. "0K3ZP-7QW2M-...". It is the 128-bit big-endian value of `random`
/// written in base 36 (36^25 > 2^128), so distinct random bytes always give
/// distinct ids and nothing random is lost.
pub fn matching_id(random: [u8; 16]) -> String {
    const ALPHABET: &[u8; 36] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const DIGITS: usize = 25;
    let mut value = u128::from_be_bytes(random);
    let mut digits = [b'0'; DIGITS];
    for slot in digits.iter_mut().rev() {
        *slot = ALPHABET[(value % 36) as usize];
        value /= 36;
    }
    let mut out = String::with_capacity(DIGITS + 4);
    for (i, group) in digits.chunks(5).enumerate() {
        if i > 0 {
            out.push('-');
        }
        out.extend(group.iter().map(|&b| char::from(b)));
    }
    out
}

/// The GSMA SGP.22 activation code "LPA:1$<SMDP_ADDRESS>$<matching id>" that
/// a device scans (as a QR code) or accepts pasted to install the profile.
pub fn lpa_string(matching_id: &str) -> String {
    // Pushed, not `format!`ed: every eSIM read renders it.
    const PREFIX: &str = "LPA:1$";
    let mut text = String::with_capacity(PREFIX.len() + SMDP_ADDRESS.len() + 1 + matching_id.len());
    text.push_str(PREFIX);
    text.push_str(SMDP_ADDRESS);
    text.push('$');
    text.push_str(matching_id);
    text
}

/// iOS 17.4+ one-tap install link: [`DIRECT_INSTALL_PREFIX`] followed by the
/// raw LPA string, exactly as in Apple's documented examples (':' and '$' are
/// legal in a URL query, so nothing is percent-encoded).
pub fn direct_install_url(lpa: &str) -> String {
    format!("{DIRECT_INSTALL_PREFIX}{lpa}")
}

/// A scannable QR code of `text` (error correction M) as a 1-bit greyscale
/// PNG with a 4-module quiet zone and 4 pixels per module, returned as
/// "data:image/png;base64,..." so it can be embedded directly in a response.
/// Deterministic: the same text always yields the same bytes.
///
/// `fast_qr` draws the module grid (about 6 times faster than `qrcode` here) and the
/// grid is packed 8 pixels a byte: a QR code is black and white, so it needs no image
/// library and no 8-bit pixels (issue 15: the PNG is drawn for every provisioning).
///
/// Errors only if `text` is longer than a QR code can hold (over 2331 bytes at
/// level M) — never for LPA strings — so callers need not handle a panic.
pub fn qr_png_data_url(text: &str) -> Result<String, CodeError> {
    let code = fast_qr::QRBuilder::new(text)
        .ecl(fast_qr::ECL::M)
        .build()
        .map_err(|e| CodeError::QrEncode(format!("{e:?}")))?;
    let modules = code.size;
    let side = (modules + 2 * QR_QUIET_ZONE_MODULES) * QR_MODULE_PIXELS;
    let row_bytes = side.div_ceil(8);
    // Bit 1 is white in a 1-bit greyscale PNG: start all white, clear the dark modules.
    let mut rows = vec![0xFFu8; row_bytes * side];
    for my in 0..modules {
        let first_row = (my + QR_QUIET_ZONE_MODULES) * QR_MODULE_PIXELS;
        let row = &mut rows[first_row * row_bytes..(first_row + 1) * row_bytes];
        for mx in 0..modules {
            if !code.data[my * modules + mx].value() {
                continue;
            }
            let first_pixel = (mx + QR_QUIET_ZONE_MODULES) * QR_MODULE_PIXELS;
            for x in first_pixel..first_pixel + QR_MODULE_PIXELS {
                row[x / 8] &= !(0x80 >> (x % 8));
            }
        }
        // The other pixel rows of this module row are copies of its first.
        for copy in 1..QR_MODULE_PIXELS {
            rows.copy_within(first_row * row_bytes..(first_row + 1) * row_bytes, (first_row + copy) * row_bytes);
        }
    }
    let png_bytes = encode_one_bit_png(&rows, side, QR_PNG_COMPRESSION)?;
    let mut out = String::from("data:image/png;base64,");
    base64::engine::general_purpose::STANDARD.encode_string(png_bytes, &mut out);
    Ok(out)
}

/// Encodes a square 1-bit greyscale image of `side` x `side` pixels, packed rows.
fn encode_one_bit_png(rows: &[u8], side: usize, compression: png::Compression) -> Result<Vec<u8>, CodeError> {
    let png_err = |e: png::EncodingError| CodeError::Png(e.to_string());
    let dim = u32::try_from(side).map_err(|e| CodeError::Png(e.to_string()))?;
    let mut buf = Vec::with_capacity(1024);
    {
        let mut encoder = png::Encoder::new(&mut buf, dim, dim);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::One);
        // "Up": the repeated pixel rows of a module row filter to zeros.
        encoder.set_filter(png::FilterType::Up);
        encoder.set_compression(compression);
        let mut writer = encoder.write_header().map_err(png_err)?;
        writer.write_image_data(rows).map_err(png_err)?;
        writer.finish().map_err(png_err)?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn luhn_known_values() {
        assert!(luhn_valid("79927398713"));
        assert!(!luhn_valid("79927398710"));
        assert!(!luhn_valid("79927398714"));
        assert_eq!(luhn_check_digit("7992739871"), 3);
        assert!(luhn_valid("4539578763621486"));
    }

    #[test]
    fn luhn_rejects_junk() {
        assert!(!luhn_valid(""));
        assert!(!luhn_valid("7"));
        assert!(!luhn_valid("7992739871a"));
        assert!(!luhn_valid("79927 398713"));
    }

    #[test]
    fn luhn_every_check_digit_is_unique() {
        for payload in ["", "0", "8944100000000000", "123456789012345678"] {
            let valid: Vec<u8> = (0..=9u8).filter(|d| luhn_valid(&format!("{payload}{d}"))).collect();
            if payload.is_empty() {
                // A lone digit is too short to be a Luhn number.
                assert!(valid.is_empty());
            } else {
                assert_eq!(valid, vec![luhn_check_digit(payload)]);
            }
        }
    }

    #[test]
    fn iccid_shape_and_luhn() {
        for serial in [0, 1, 42, 999_999_999_999, 1_000_000_000_000, u64::MAX] {
            let iccid = iccid_for_serial(serial);
            assert_eq!(iccid.len(), 19, "{iccid}");
            assert!(iccid.bytes().all(|b| b.is_ascii_digit()), "{iccid}");
            assert!(iccid.starts_with("894410"), "{iccid}");
            assert!(luhn_valid(&iccid), "{iccid}");
        }
        assert_eq!(
            iccid_for_serial(42).as_str(),
            format!("894410000000000042{}", luhn_check_digit("894410000000000042"))
        );
    }

    #[test]
    fn an_iccid_is_19_digits_inline_and_written_as_its_text() {
        let iccid = iccid_for_serial(42);
        assert_eq!(std::mem::size_of::<Iccid>(), ICCID_DIGITS, "no heap block, no length");
        assert_eq!(Iccid::parse(&iccid), Some(iccid));
        for bad in ["", "894410000000000042", "89441000000000004211", "89441000000000004a1", "８94410000000000042"] {
            assert_eq!(Iccid::parse(bad), None, "{bad:?}");
        }
        let written = serde_json::to_string(&iccid).unwrap();
        assert_eq!(written, format!("\"{}\"", iccid.as_str()));
        assert_eq!(serde_json::from_str::<Iccid>(&written).unwrap(), iccid);
        let refused = serde_json::from_str::<Iccid>("\"8944100000000000421x\"").unwrap_err().to_string();
        assert!(refused.contains("is not a 19-digit ICCID"), "{refused}");
        assert_eq!(format!("{iccid} {iccid:?}"), format!("{0} {0:?}", iccid.as_str()));
    }

    #[test]
    fn iccids_distinct_for_10000_serials() {
        let mut seen = BTreeSet::new();
        for serial in 0..10_000u64 {
            let iccid = iccid_for_serial(serial);
            assert!(luhn_valid(&iccid));
            assert!(seen.insert(iccid));
        }
        // A spread of large serials too.
        for serial in (0..10_000u64).map(|i| 1_000_000 + i * 99_991_777) {
            assert!(seen.insert(iccid_for_serial(serial)));
        }
    }

    fn assert_matching_id_shape(id: &str) {
        assert_eq!(id.len(), 29, "{id}");
        let groups: Vec<&str> = id.split('-').collect();
        assert_eq!(groups.len(), 5, "{id}");
        for g in groups {
            assert_eq!(g.len(), 5, "{id}");
            assert!(g.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()), "{id}");
        }
    }

    #[test]
    fn matching_id_format_and_edges() {
        let zero = matching_id([0; 16]);
        assert_eq!(zero, "00000-00000-00000-00000-00000");
        let max = matching_id([0xFF; 16]);
        assert_matching_id_shape(&max);
        // 2^128 - 1 in base 36 (cross-checked independently).
        assert_eq!(max, "F5LXX-1ZZ5P-NORYN-QGLHZ-MSP33");
        let mut one = [0u8; 16];
        one[15] = 35;
        assert_eq!(matching_id(one), "00000-00000-00000-00000-0000Z");
    }

    #[test]
    fn matching_ids_distinct_and_deterministic() {
        let mut seen = BTreeSet::new();
        for i in 0..10_000u32 {
            let mut bytes = [0u8; 16];
            // Cheap deterministic spread of bytes.
            let x = u128::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835);
            bytes.copy_from_slice(&x.to_be_bytes());
            let id = matching_id(bytes);
            assert_matching_id_shape(&id);
            assert_eq!(id, matching_id(bytes));
            assert!(seen.insert(id));
        }
    }

    #[test]
    fn lpa_format() {
        let id = matching_id([7; 16]);
        let lpa = lpa_string(&id);
        assert_eq!(lpa, format!("LPA:1$smdp.esim-reseller.example${id}"));
        let parts: Vec<&str> = lpa.split('$').collect();
        assert_eq!(parts, vec!["LPA:1", SMDP_ADDRESS, id.as_str()]);
    }

    #[test]
    fn direct_install_url_prefix() {
        let lpa = lpa_string(&matching_id([1; 16]));
        let url = direct_install_url(&lpa);
        assert!(url.starts_with("https://esimsetup.apple.com/esim_qrcode_provisioning?carddata="));
        assert_eq!(url, format!("{DIRECT_INSTALL_PREFIX}{lpa}"));
        assert!(url.ends_with(&lpa));
    }

    /// Decodes a data URL back to (width, height, greyscale pixels).
    fn decode_data_url(url: &str) -> (usize, usize, Vec<u8>) {
        let b64 = url.strip_prefix("data:image/png;base64,").expect("data URL prefix");
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).expect("valid base64");
        let mut decoder = png::Decoder::new(bytes.as_slice());
        // The PNG is 1-bit: expand it to 8-bit greyscale (0 or 255) for the scanner.
        decoder.set_transformations(png::Transformations::EXPAND);
        let mut reader = decoder.read_info().expect("png header");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("png frame");
        assert_eq!(info.color_type, png::ColorType::Grayscale);
        assert_eq!(info.bit_depth, png::BitDepth::Eight, "expanded from 1 bit");
        buf.truncate(info.buffer_size());
        (info.width as usize, info.height as usize, buf)
    }

    fn scan(url: &str) -> String {
        let (w, h, pixels) = decode_data_url(url);
        assert_eq!(w, h);
        assert_eq!(w % QR_MODULE_PIXELS, 0);
        let mut img = rqrr::PreparedImage::prepare_from_greyscale(w, h, |x, y| pixels[y * w + x]);
        let grids = img.detect_grids();
        assert_eq!(grids.len(), 1, "exactly one QR code expected");
        let (_meta, content) = grids[0].decode().expect("QR decodes");
        content
    }

    #[test]
    fn qr_png_round_trips_lpa() {
        for seed in [0u8, 1, 0x5A, 0xFF] {
            let lpa = lpa_string(&matching_id([seed; 16]));
            let url = qr_png_data_url(&lpa).expect("LPA fits in a QR code");
            assert_eq!(scan(&url), lpa);
        }
    }

    #[test]
    fn qr_png_round_trips_direct_install_url() {
        let url = direct_install_url(&lpa_string(&matching_id([0xA7; 16])));
        let png = qr_png_data_url(&url).expect("fits");
        assert_eq!(scan(&png), url);
    }

    #[test]
    fn qr_png_is_deterministic_and_has_quiet_zone() {
        let lpa = lpa_string(&matching_id([3; 16]));
        let a = qr_png_data_url(&lpa).unwrap();
        let b = qr_png_data_url(&lpa).unwrap();
        assert_eq!(a, b);
        let (w, _h, pixels) = decode_data_url(&a);
        let border = QR_QUIET_ZONE_MODULES * QR_MODULE_PIXELS;
        for y in 0..w {
            for x in 0..w {
                let in_border = x < border || y < border || x >= w - border || y >= w - border;
                let p = pixels[y * w + x];
                assert!(p == 0 || p == 255);
                if in_border {
                    assert_eq!(p, 255, "quiet zone must be light at ({x},{y})");
                }
            }
        }
        // Top-left finder pattern corner is dark.
        assert_eq!(pixels[border * w + border], 0);
    }

    #[test]
    fn qr_png_errors_instead_of_panicking_on_oversized_text() {
        let huge = "x".repeat(5_000);
        assert!(matches!(qr_png_data_url(&huge), Err(CodeError::QrEncode(_))));
        // Empty text is still a valid (tiny) QR code.
        assert!(qr_png_data_url("").is_ok());
    }
}
