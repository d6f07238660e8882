//! The data rates table served by `GET /rates` and used to price usage.
//!
//! Why it looks like this:
//! - The table is shipped inside the crate as one compact text constant ([`RETAIL_TABLE`])
//!   and parsed once, so the engine stays deterministic and IO-free: every run, every
//!   replica and every test sees byte-identical rates.
//! - The constant holds *retail* prices. Reseller prices are derived from them (exactly
//!   10% below, see [`RESELLER_FACTOR`]) instead of being written twice, so the discount
//!   promised by [`DISCOUNT_TEXT`] holds on every network by construction, and the upstream
//!   model (credit in retail cents, see `money`) can use the same retail figures.
//! - Money is `rust_decimal::Decimal` built from integers, never floats, so
//!   `per_gb == retail * 0.9` and `per_mb * 1000 == per_gb` hold exactly. Values are
//!   normalized so that they serialize as `4.5`, not `4.50`.

use crate::schema;
use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::Serialize;
use std::sync::OnceLock;

/// Megabytes in one gigabyte. Data is sold in decimal units (as carriers bill it), so
/// `per_mb_usd = per_gb_usd / 1000` exactly, with no binary 1024 factor.
pub const MB_PER_GB: u32 = 1000;

/// The discount statement returned by `GET /rates`. Every reseller price is derived from
/// the retail table by the same factor, so one sentence describes all of them.
pub const DISCOUNT_TEXT: &str = "10% below retail on every network";

/// Reseller price = retail price * 0.9 (10% below retail), as an exact decimal.
const RESELLER_FACTOR: Decimal = Decimal::from_parts(9, 0, 0, false, 1);

/// The continents a country can belong to (the spec's closed list).
const CONTINENTS: [&str; 6] = ["Africa", "Asia", "Europe", "North America", "South America", "Oceania"];

/// One mobile network of a country and its reseller price.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(description = "Reseller price of one network")]
pub struct NetworkRate {
    /// Operator name as shown to customers (unique within its country).
    #[schemars(description = "Operator name")]
    pub operator: String,
    /// Reseller price of one decimal megabyte: `per_gb_usd / 1000`, exact and normalized.
    #[schemars(description = "USD. Price of one MB (1 GB = 1000 MB)", with = "schema::Usd")]
    pub per_mb_usd: Decimal,
    /// Reseller price of one gigabyte: `retail_per_gb_usd * 0.9`, exact and normalized.
    #[schemars(description = "USD. Price of one GB (10% below retail)", with = "schema::Usd")]
    pub per_gb_usd: Decimal,
    /// The retail price the discount is computed from. Internal (the upstream model
    /// bills in retail terms), hence not serialized.
    #[serde(skip)]
    pub retail_per_gb_usd: Decimal,
}

/// One country or territory of the rates table, in the spec's JSON shape.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(description = "Rates of one country")]
pub struct Country {
    /// Country name, as the spec's table spells it.
    #[schemars(description = "Country name")]
    pub name: String,
    /// ISO 3166-1 alpha-2, upper case.
    #[schemars(description = "ISO 3166-1 alpha-2 code")]
    pub iso2: String,
    /// ISO 3166-1 alpha-3, upper case.
    #[schemars(description = "ISO 3166-1 alpha-3 code")]
    pub iso3: String,
    /// Flag emoji, computed from `iso2` (two regional indicator symbols) so it can never
    /// disagree with the code.
    #[schemars(description = "Flag emoji")]
    pub flag: String,
    /// One of "Africa", "Asia", "Europe", "North America", "South America", "Oceania".
    #[schemars(description = "Africa, Asia, Europe, North America, South America or Oceania")]
    pub continent: String,
    /// False where no data service is sold (networks are still listed, usage is refused).
    #[schemars(description = "False where no data service is sold")]
    pub has_data: bool,
    /// The lowest reseller per-GB price among `networks`.
    #[schemars(description = "USD. Lowest per-GB price among the networks", with = "schema::Usd")]
    pub cheapest_per_gb_usd: Decimal,
    /// The network with that price (ties broken by operator name ascending, so the choice
    /// is deterministic).
    #[schemars(description = "The network with that price")]
    pub cheapest_operator: String,
    /// Every network of the country (1 to 4) with its prices, in the table's order; usage
    /// picks one by operator name.
    #[schemars(description = "Networks of the country")]
    pub networks: Vec<NetworkRate>,
    /// URL-friendly name used by the `country` filter (e.g. "united-states",
    /// "cote-d-ivoire"). Not part of the spec's JSON, hence not serialized.
    #[serde(skip)]
    pub slug: String,
}

/// The parsed rates table: every country, sorted by name (accent- and case-insensitively,
/// i.e. by slug) so that listings are stable.
#[derive(Debug)]
pub struct RateTable {
    countries: Vec<Country>,
    /// Position in `countries` by ISO2 letters (26 x 26), for the per-usage lookup.
    by_iso2: Vec<Option<u16>>,
}

/// Slot of an ISO2 code in the lookup table (ASCII letters, any case).
fn iso2_slot(iso2: &str) -> Option<usize> {
    match iso2.as_bytes() {
        [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
            Some(usize::from(a.to_ascii_uppercase() - b'A') * 26 + usize::from(b.to_ascii_uppercase() - b'A'))
        }
        _ => None,
    }
}

impl RateTable {
    /// The built-in table, parsed from [`RETAIL_TABLE`] on first use and shared afterwards
    /// (a `OnceLock`, so parsing happens once and needs no locking later).
    ///
    /// Panics only if the constant is malformed, which the unit tests rule out.
    pub fn builtin() -> &'static RateTable {
        static TABLE: OnceLock<RateTable> = OnceLock::new();
        TABLE.get_or_init(|| match parse(RETAIL_TABLE) {
            Ok(table) => table,
            Err(e) => panic!("the built-in rates table is malformed: {e}"),
        })
    }

    /// Every country, sorted by name.
    pub fn countries(&self) -> &[Country] {
        &self.countries
    }

    /// The countries matching both filters, in table order.
    ///
    /// country: matches ISO2, ISO3, slug (lowercase name, non-alphanumerics collapsed to
    /// '-', e.g. "united-states", "cote-d-ivoire") or name, ignoring ASCII case and
    /// surrounding whitespace; continent: matches the continent name or its slug
    /// ("north-america"), ignoring case and surrounding whitespace. None = no filter.
    /// No match -> empty Vec (an unknown filter value is not an error: the listing is
    /// simply empty).
    pub fn filter(&self, country: Option<&str>, continent: Option<&str>) -> Vec<&Country> {
        let country = country.map(str::trim);
        let continent = continent.map(str::trim);
        self.countries
            .iter()
            .filter(|c| match country {
                Some(q) => country_matches(c, q),
                None => true,
            })
            .filter(|c| match continent {
                Some(q) => continent_matches(&c.continent, q),
                None => true,
            })
            .collect()
    }

    /// Lookup by ISO2 (case-insensitive): usage reports and eSIMs name countries by ISO2.
    pub fn by_iso2(&self, iso2: &str) -> Option<&Country> {
        let position = self.by_iso2[iso2_slot(iso2)?]?;
        Some(&self.countries[usize::from(position)])
    }

    /// The network a device uses: the named operator (case-insensitive exact name) or,
    /// when None, the cheapest one (what a device on automatic selection is billed at).
    /// None when the country or operator is unknown.
    pub fn network(&self, iso2: &str, operator: Option<&str>) -> Option<&NetworkRate> {
        let country = self.by_iso2(iso2)?;
        let wanted = operator.unwrap_or(&country.cheapest_operator);
        country.networks.iter().find(|n| n.operator.eq_ignore_ascii_case(wanted))
    }
}

fn country_matches(c: &Country, query: &str) -> bool {
    c.iso2.eq_ignore_ascii_case(query)
        || c.iso3.eq_ignore_ascii_case(query)
        || c.slug.eq_ignore_ascii_case(query)
        || c.name.eq_ignore_ascii_case(query)
}

fn continent_matches(continent: &str, query: &str) -> bool {
    continent.eq_ignore_ascii_case(query) || slugify(continent).eq_ignore_ascii_case(query)
}

/// Lowercase ASCII slug: common Latin accents folded ("Côte" -> "cote"), every run of
/// other non-alphanumerics collapsed to one '-', no leading or trailing '-'.
fn slugify(name: &str) -> String {
    let mut slug = String::with_capacity(name.len());
    let mut pending_dash = false;
    for ch in name.chars().map(fold_accent) {
        if ch.is_ascii_alphanumeric() {
            if pending_dash && !slug.is_empty() {
                slug.push('-');
            }
            pending_dash = false;
            slug.push(ch.to_ascii_lowercase());
        } else {
            pending_dash = true;
        }
    }
    slug
}

fn fold_accent(ch: char) -> char {
    match ch {
        'à' | 'á' | 'â' | 'ã' | 'ä' | 'å' | 'À' | 'Á' | 'Â' | 'Ã' | 'Ä' | 'Å' => 'a',
        'ç' | 'Ç' => 'c',
        'è' | 'é' | 'ê' | 'ë' | 'È' | 'É' | 'Ê' | 'Ë' => 'e',
        'ì' | 'í' | 'î' | 'ï' | 'Ì' | 'Í' | 'Î' | 'Ï' => 'i',
        'ñ' | 'Ñ' => 'n',
        'ò' | 'ó' | 'ô' | 'õ' | 'ö' | 'ø' | 'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ö' | 'Ø' => 'o',
        'ù' | 'ú' | 'û' | 'ü' | 'Ù' | 'Ú' | 'Û' | 'Ü' => 'u',
        'ý' | 'ÿ' | 'Ý' => 'y',
        other => other,
    }
}

/// The flag emoji of an ISO2 code: each letter mapped to its regional indicator symbol.
fn flag(iso2: &str) -> Option<String> {
    iso2.chars()
        .map(|c| if c.is_ascii_uppercase() { char::from_u32(0x1F1E6 + (c as u32 - 'A' as u32)) } else { None })
        .collect()
}

/// A retail price with exactly two decimals ("4.50"), built from integers.
fn parse_price(text: &str) -> Result<Decimal, String> {
    let bad = || format!("price {text:?} is not a positive amount with exactly 2 decimals");
    let (whole, cents) = text.split_once('.').ok_or_else(bad)?;
    let digits =
        |s: &str, len: std::ops::RangeInclusive<usize>| len.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole, 1..=4) || !digits(cents, 2..=2) {
        return Err(bad());
    }
    let whole: i64 = whole.parse().map_err(|_| bad())?;
    let cents: i64 = cents.parse().map_err(|_| bad())?;
    let price = Decimal::new(whole * 100 + cents, 2);
    if price <= Decimal::ZERO {
        return Err(bad());
    }
    Ok(price.normalize())
}

fn parse_network(item: &str) -> Result<NetworkRate, String> {
    // rsplit: operator names may contain ':' (e.g. "m:tel"), prices never do.
    let (operator, price) = item.rsplit_once(':').ok_or_else(|| format!("network {item:?} is not OPERATOR:PRICE"))?;
    let operator = operator.trim();
    if operator.is_empty() {
        return Err(format!("network {item:?} has no operator name"));
    }
    let retail = parse_price(price.trim())?;
    let per_gb = (retail * RESELLER_FACTOR).normalize();
    let per_mb = (per_gb / Decimal::from(MB_PER_GB)).normalize();
    Ok(NetworkRate {
        operator: operator.to_string(),
        per_mb_usd: per_mb,
        per_gb_usd: per_gb,
        retail_per_gb_usd: retail,
    })
}

/// One line: `ISO2|ISO3|Name|Continent|Op:retail,Op:retail[|nodata]`.
fn parse_line(line: &str) -> Result<Country, String> {
    let fields: Vec<&str> = line.split('|').map(str::trim).collect();
    let has_data = match fields.len() {
        5 => true,
        6 if fields[5] == "nodata" => false,
        _ => return Err("expected ISO2|ISO3|Name|Continent|Networks[|nodata]".to_string()),
    };
    let (iso2, iso3, name, continent) = (fields[0], fields[1], fields[2], fields[3]);
    if iso2.len() != 2 || !iso2.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("bad ISO2 {iso2:?}"));
    }
    if iso3.len() != 3 || !iso3.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("bad ISO3 {iso3:?}"));
    }
    if name.is_empty() {
        return Err("empty name".to_string());
    }
    if !CONTINENTS.contains(&continent) {
        return Err(format!("unknown continent {continent:?}"));
    }
    let networks = fields[4].split(',').map(parse_network).collect::<Result<Vec<_>, _>>()?;
    if !(1..=4).contains(&networks.len()) {
        return Err(format!("{} networks, expected 1 to 4", networks.len()));
    }
    for (i, n) in networks.iter().enumerate() {
        if networks[..i].iter().any(|m| m.operator.eq_ignore_ascii_case(&n.operator)) {
            return Err(format!("operator {:?} listed twice", n.operator));
        }
    }
    let cheapest = networks
        .iter()
        .min_by(|a, b| a.per_gb_usd.cmp(&b.per_gb_usd).then_with(|| a.operator.cmp(&b.operator)))
        .ok_or("no networks")?;
    Ok(Country {
        name: name.to_string(),
        iso2: iso2.to_string(),
        iso3: iso3.to_string(),
        flag: flag(iso2).ok_or("bad ISO2")?,
        continent: continent.to_string(),
        has_data,
        cheapest_per_gb_usd: cheapest.per_gb_usd,
        cheapest_operator: cheapest.operator.clone(),
        slug: slugify(name),
        networks,
    })
}

/// Parses a table (blank lines and `#` comments ignored) and sorts it by name.
fn parse(text: &str) -> Result<RateTable, String> {
    let mut countries = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        countries.push(parse_line(line).map_err(|e| format!("line {}: {e}: {line}", number + 1))?);
    }
    countries.sort_by(|a, b| a.slug.cmp(&b.slug).then_with(|| a.name.cmp(&b.name)));
    let mut by_iso2 = vec![None; 26 * 26];
    for (position, country) in countries.iter().enumerate() {
        let slot = iso2_slot(&country.iso2).ok_or_else(|| format!("bad ISO2 {}", country.iso2))?;
        by_iso2[slot] = Some(position as u16);
    }
    Ok(RateTable { countries, by_iso2 })
}

/// The retail table: `ISO2|ISO3|Name|Continent|Operator:retail USD per GB,...[|nodata]`.
///
/// Prices are RETAIL, in USD per (decimal) GB with exactly two decimals; reseller prices
/// are derived (x 0.9). A trailing `|nodata` marks a country where no data is sold. Kept as
/// text so the table stays compact and reviewable line by line.
const RETAIL_TABLE: &str = r"
# Europe
AL|ALB|Albania|Europe|Vodafone:6.50,One:6.90
AD|AND|Andorra|Europe|Andorra Telecom:9.50
AT|AUT|Austria|Europe|A1:4.50,Magenta:4.20,Drei:4.00
BY|BLR|Belarus|Europe|A1:7.50,MTS:7.00,life:7.20
BE|BEL|Belgium|Europe|Proximus:5.50,Orange:5.20,Base:5.00
BA|BIH|Bosnia and Herzegovina|Europe|BH Telecom:7.00,m:tel:6.80,HT Eronet:7.20
BG|BGR|Bulgaria|Europe|A1:4.80,Vivacom:4.60,Yettel:4.50
HR|HRV|Croatia|Europe|Hrvatski Telekom:4.90,A1:4.70,Telemach:4.60
CY|CYP|Cyprus|Europe|Cyta:5.50,Epic:5.30,PrimeTel:5.60
CZ|CZE|Czechia|Europe|T-Mobile:5.20,O2:5.00,Vodafone:4.90
DK|DNK|Denmark|Europe|TDC:4.20,Telenor:4.00,Telia:4.10,3:3.90
EE|EST|Estonia|Europe|Telia:4.00,Elisa:3.90,Tele2:3.80
FO|FRO|Faroe Islands|Europe|Føroya Tele:9.00,Hey:9.50
FI|FIN|Finland|Europe|Elisa:3.50,DNA:3.40,Telia:3.60
FR|FRA|France|Europe|Orange:4.50,SFR:4.30,Bouygues Telecom:4.20,Free Mobile:4.00
DE|DEU|Germany|Europe|Telekom:5.00,Vodafone:5.50,O2:4.80
GI|GIB|Gibraltar|Europe|Gibtelecom:8.00
GR|GRC|Greece|Europe|Cosmote:5.20,Vodafone:5.00,Nova:4.90
GG|GGY|Guernsey|Europe|Sure:7.50,Airtel-Vodafone:7.80
HU|HUN|Hungary|Europe|Telekom:5.00,Yettel:4.80,One:4.70
IS|ISL|Iceland|Europe|Síminn:6.00,Vodafone:5.80,Nova:5.70
IE|IRL|Ireland|Europe|Vodafone:4.50,Three:4.20,eir:4.40
IM|IMN|Isle of Man|Europe|Manx Telecom:7.50,Sure:7.80
IT|ITA|Italy|Europe|TIM:4.40,Vodafone:4.60,WindTre:4.20,Iliad:3.90
JE|JEY|Jersey|Europe|JT:7.50,Sure:7.80,Airtel-Vodafone:7.90
LV|LVA|Latvia|Europe|LMT:4.10,Tele2:3.90,Bite:4.00
LI|LIE|Liechtenstein|Europe|Swisscom:9.00,Salt:8.50,FL1:8.80
LT|LTU|Lithuania|Europe|Telia:3.90,Bite:3.80,Tele2:3.70
LU|LUX|Luxembourg|Europe|POST:5.50,Tango:5.20,Orange:5.30
MT|MLT|Malta|Europe|Epic:5.50,GO:5.70,Melita:5.40
MD|MDA|Moldova|Europe|Orange:6.00,Moldcell:5.80
MC|MCO|Monaco|Europe|Monaco Telecom:9.50
ME|MNE|Montenegro|Europe|Crnogorski Telekom:7.00,One:6.80,m:tel:6.90
NL|NLD|Netherlands|Europe|KPN:5.00,Vodafone:5.20,Odido:4.80
MK|MKD|North Macedonia|Europe|Makedonski Telekom:6.50,A1:6.30
NO|NOR|Norway|Europe|Telenor:5.50,Telia:5.30,Ice:5.00
PL|POL|Poland|Europe|Orange:3.80,Play:3.50,Plus:3.70,T-Mobile:3.90
PT|PRT|Portugal|Europe|MEO:4.60,NOS:4.50,Vodafone:4.70
RO|ROU|Romania|Europe|Orange:3.60,Vodafone:3.70,Digi:3.20
RU|RUS|Russia|Europe|MTS:6.00,MegaFon:5.80,Beeline:5.90,Tele2:5.50|nodata
SM|SMR|San Marino|Europe|TIM San Marino:9.00
RS|SRB|Serbia|Europe|mts:6.00,Yettel:5.80,A1:5.70
SK|SVK|Slovakia|Europe|Orange:4.80,Telekom:4.90,O2:4.60,4ka:4.50
SI|SVN|Slovenia|Europe|Telekom Slovenije:4.90,A1:4.70,Telemach:4.60
ES|ESP|Spain|Europe|Movistar:4.40,Orange:4.20,Vodafone:4.50,Yoigo:4.00
SE|SWE|Sweden|Europe|Telia:4.20,Tele2:4.00,Telenor:4.10,Tre:3.90
CH|CHE|Switzerland|Europe|Swisscom:8.50,Sunrise:8.00,Salt:7.80
UA|UKR|Ukraine|Europe|Kyivstar:3.50,Vodafone:3.40,lifecell:3.30
GB|GBR|United Kingdom|Europe|EE:4.50,Vodafone:4.70,O2:4.40,Three:4.20
# Asia
AF|AFG|Afghanistan|Asia|Roshan:14.00,AWCC:13.50,Etisalat:13.80
AM|ARM|Armenia|Asia|Team:6.50,Viva:6.30,Ucom:6.00
AZ|AZE|Azerbaijan|Asia|Azercell:7.00,Bakcell:6.80,Nar:6.50
BH|BHR|Bahrain|Asia|Batelco:9.00,Zain:8.50,stc:8.80
BD|BGD|Bangladesh|Asia|Grameenphone:6.00,Robi:5.50,Banglalink:5.60,Teletalk:5.80
BT|BTN|Bhutan|Asia|B-Mobile:12.00,TashiCell:11.50
BN|BRN|Brunei|Asia|DST:10.00,Progresif:9.50,imagine:10.50
KH|KHM|Cambodia|Asia|Smart:5.00,Cellcard:5.20,Metfone:4.80
CN|CHN|China|Asia|China Mobile:6.50,China Unicom:6.00,China Telecom:6.20
GE|GEO|Georgia|Asia|Magti:5.50,Silknet:5.30,Cellfie:5.00
HK|HKG|Hong Kong|Asia|CSL:4.50,SmarTone:4.30,3:4.20,China Mobile Hong Kong:4.00
IN|IND|India|Asia|Jio:3.00,Airtel:3.20,Vi:3.50
ID|IDN|Indonesia|Asia|Telkomsel:4.50,Indosat:4.20,XL Axiata:4.00
IR|IRN|Iran|Asia|MCI:9.00,Irancell:8.50,RighTel:8.80|nodata
IQ|IRQ|Iraq|Asia|Zain:10.00,Asiacell:9.50,Korek:10.50
IL|ISR|Israel|Asia|Partner:5.50,Cellcom:5.30,Pelephone:5.60,HOT Mobile:5.00
JP|JPN|Japan|Asia|NTT Docomo:6.00,au:6.20,SoftBank:5.80,Rakuten Mobile:5.50
JO|JOR|Jordan|Asia|Zain:8.00,Orange:7.80,Umniah:7.50
KZ|KAZ|Kazakhstan|Asia|Kcell:5.50,Beeline:5.30,Tele2:5.00
KW|KWT|Kuwait|Asia|Zain:9.00,Ooredoo:8.80,stc:8.50
KG|KGZ|Kyrgyzstan|Asia|Beeline:6.50,MegaCom:6.30,O!:6.00
LA|LAO|Laos|Asia|Lao Telecom:7.00,Unitel:6.80,ETL:7.20
LB|LBN|Lebanon|Asia|Alfa:12.00,touch:12.50
MO|MAC|Macao|Asia|CTM:5.50,3:5.30,China Telecom:5.00
MY|MYS|Malaysia|Asia|Maxis:4.50,CelcomDigi:4.30,U Mobile:4.00,Unifi Mobile:4.20
MV|MDV|Maldives|Asia|Dhiraagu:12.00,Ooredoo:11.50
MN|MNG|Mongolia|Asia|Mobicom:7.00,Unitel:6.80,Skytel:6.50
MM|MMR|Myanmar|Asia|MPT:8.00,ATOM:7.80,Ooredoo:7.50,Mytel:7.00
NP|NPL|Nepal|Asia|Nepal Telecom:7.00,Ncell:6.80
KP|PRK|North Korea|Asia|Koryolink:24.00,Kang Song NET:25.00|nodata
OM|OMN|Oman|Asia|Omantel:9.00,Ooredoo:8.80,Vodafone:8.50
PK|PAK|Pakistan|Asia|Jazz:5.00,Zong:4.80,Telenor:4.90,Ufone:5.20
PS|PSE|Palestine|Asia|Jawwal:9.00,Ooredoo:8.50
PH|PHL|Philippines|Asia|Smart:5.50,Globe:5.30,DITO:5.00
QA|QAT|Qatar|Asia|Ooredoo:8.50,Vodafone:8.20
SA|SAU|Saudi Arabia|Asia|stc:7.50,Mobily:7.20,Zain:7.00
SG|SGP|Singapore|Asia|Singtel:4.50,StarHub:4.30,M1:4.20,SIMBA:3.90
KR|KOR|South Korea|Asia|SK Telecom:6.00,KT:5.80,LG U+:5.50
LK|LKA|Sri Lanka|Asia|Dialog:5.50,Mobitel:5.30,Hutch:5.00
SY|SYR|Syria|Asia|Syriatel:14.00,MTN:14.50|nodata
TW|TWN|Taiwan|Asia|Chunghwa Telecom:5.00,Taiwan Mobile:4.80,FarEasTone:4.70
TJ|TJK|Tajikistan|Asia|Tcell:8.00,Babilon-M:7.80,MegaFon:7.50,ZET-Mobile:7.20
TH|THA|Thailand|Asia|AIS:4.50,TrueMove H:4.20,NT Mobile:4.80
TL|TLS|Timor-Leste|Asia|Telkomcel:14.00,Timor Telecom:14.50,Telemor:13.50
TR|TUR|Turkey|Asia|Turkcell:6.50,Vodafone:6.30,Türk Telekom:6.00
TM|TKM|Turkmenistan|Asia|TMCELL:18.00
AE|ARE|United Arab Emirates|Asia|e&:8.00,du:7.80
UZ|UZB|Uzbekistan|Asia|Beeline:6.00,Ucell:5.80,Mobiuz:5.50,Uzmobile:5.70
VN|VNM|Vietnam|Asia|Viettel:4.00,Vinaphone:3.80,MobiFone:3.90
YE|YEM|Yemen|Asia|Yemen Mobile:18.00,YOU:18.50,Sabafon:19.00
# Africa
DZ|DZA|Algeria|Africa|Mobilis:9.00,Djezzy:8.80,Ooredoo:8.50
AO|AGO|Angola|Africa|Unitel:12.00,Africell:11.50,Movicel:12.50
BJ|BEN|Benin|Africa|MTN:12.00,Moov Africa:11.50
BW|BWA|Botswana|Africa|Mascom:11.00,Orange:10.50,beMobile:11.50
BF|BFA|Burkina Faso|Africa|Orange:13.00,Moov Africa:12.50,Telecel:13.50
BI|BDI|Burundi|Africa|Econet Leo:16.00,Lumitel:15.50
CV|CPV|Cabo Verde|Africa|CVMóvel:13.00,Unitel T+:12.50
CM|CMR|Cameroon|Africa|MTN:11.00,Orange:10.80,Nexttel:11.50
CF|CAF|Central African Republic|Africa|Orange:20.00,Telecel:21.00,Moov Africa:20.50
TD|TCD|Chad|Africa|Airtel:19.00,Moov Africa:19.50
KM|COM|Comoros|Africa|Comores Telecom:18.00,Telma:17.50
CG|COG|Republic of the Congo|Africa|MTN:15.00,Airtel:14.50
CD|COD|Democratic Republic of the Congo|Africa|Vodacom:14.00,Orange:13.50,Airtel:13.80,Africell:13.00
CI|CIV|Côte d'Ivoire|Africa|Orange:11.00,MTN:10.80,Moov Africa:11.50
DJ|DJI|Djibouti|Africa|Djibouti Telecom:18.00
EG|EGY|Egypt|Africa|Vodafone:6.00,Orange:5.80,e&:5.50,WE:5.70
GQ|GNQ|Equatorial Guinea|Africa|GETESA:22.00,Muni:21.50
ER|ERI|Eritrea|Africa|Eritel:25.00
SZ|SWZ|Eswatini|Africa|MTN:12.00,Eswatini Mobile:11.50
ET|ETH|Ethiopia|Africa|Ethio Telecom:10.00,Safaricom:9.50
GA|GAB|Gabon|Africa|Airtel:14.00,Moov Africa:14.50
GM|GMB|Gambia|Africa|Africell:13.00,QCell:12.50,Gamcel:13.50
GH|GHA|Ghana|Africa|MTN:8.00,Telecel:7.80,AirtelTigo:7.50
GN|GIN|Guinea|Africa|Orange:14.00,Cellcom:13.80
GW|GNB|Guinea-Bissau|Africa|Orange:17.00,Telecel:17.50
KE|KEN|Kenya|Africa|Safaricom:7.00,Airtel:6.50,Telkom:6.80
LS|LSO|Lesotho|Africa|Vodacom:12.00,Econet Telecom:11.50
LR|LBR|Liberia|Africa|Orange:14.00,Lonestar Cell MTN:13.50
LY|LBY|Libya|Africa|Libyana:16.00,Almadar:15.50
MG|MDG|Madagascar|Africa|Telma:12.00,Orange:11.50,Airtel:11.80
MW|MWI|Malawi|Africa|Airtel:12.00,TNM:11.50
ML|MLI|Mali|Africa|Orange:13.00,Moov Africa:12.50,Telecel:13.50
MR|MRT|Mauritania|Africa|Mauritel:15.00,Mattel:14.50,Chinguitel:15.50
MU|MUS|Mauritius|Africa|my.t:9.00,Emtel:8.50,MTML:8.80
MA|MAR|Morocco|Africa|Maroc Telecom:7.00,Orange:6.80,inwi:6.50
MZ|MOZ|Mozambique|Africa|Vodacom:11.00,Movitel:10.50,Tmcel:11.50
NA|NAM|Namibia|Africa|MTC:10.00,TN Mobile:10.50
NE|NER|Niger|Africa|Airtel:15.00,Moov Africa:14.50,Zamani Telecom:15.50
NG|NGA|Nigeria|Africa|MTN:6.50,Airtel:6.30,Glo:6.00,9mobile:6.80
RE|REU|Réunion|Africa|Orange:7.00,SFR Réunion:6.80,Free:6.50
RW|RWA|Rwanda|Africa|MTN:10.00,Airtel:9.50
ST|STP|São Tomé and Príncipe|Africa|CST:20.00,Unitel:19.50
SN|SEN|Senegal|Africa|Orange:10.00,Free:9.50,Expresso:10.50
SC|SYC|Seychelles|Africa|Airtel:15.00,Cable & Wireless:15.50
SL|SLE|Sierra Leone|Africa|Orange:14.00,Africell:13.50,Qcell:14.50
SO|SOM|Somalia|Africa|Hormuud:16.00,Somtel:15.50,Golis:16.50
ZA|ZAF|South Africa|Africa|Vodacom:7.50,MTN:7.30,Cell C:7.00,Telkom:6.80
SS|SSD|South Sudan|Africa|MTN:22.00,Zain:21.50
SD|SDN|Sudan|Africa|Zain:14.00,MTN:13.50,Sudani:13.00
TZ|TZA|Tanzania|Africa|Vodacom:8.00,Airtel:7.80,Tigo:7.50,Halotel:7.20
TG|TGO|Togo|Africa|Togocom:13.00,Moov Africa:12.50
TN|TUN|Tunisia|Africa|Ooredoo:8.00,Orange:7.80,Tunisie Telecom:8.20
UG|UGA|Uganda|Africa|MTN:9.00,Airtel:8.50
ZM|ZMB|Zambia|Africa|MTN:10.00,Airtel:9.50,Zamtel:10.50
ZW|ZWE|Zimbabwe|Africa|Econet:13.00,NetOne:12.50,Telecel:13.50
# North America (with Central America and the Caribbean)
AI|AIA|Anguilla|North America|Flow:16.00,Digicel:15.50
AG|ATG|Antigua and Barbuda|North America|Flow:15.00,Digicel:14.50,APUA:15.50
AW|ABW|Aruba|North America|Setar:13.00,Digicel:12.50
BS|BHS|Bahamas|North America|BTC:13.00,Aliv:12.50
BB|BRB|Barbados|North America|Flow:13.00,Digicel:12.50
BZ|BLZ|Belize|North America|DigiCell:14.00,Smart:13.50
BM|BMU|Bermuda|North America|One:15.00,Digicel:14.50
VG|VGB|British Virgin Islands|North America|Flow:16.00,Digicel:15.50,CCT:16.50
CA|CAN|Canada|North America|Rogers:7.00,Bell:7.20,Telus:7.10,Freedom Mobile:6.50
KY|CYM|Cayman Islands|North America|Flow:15.00,Digicel:14.50
CR|CRI|Costa Rica|North America|Kölbi:7.00,Claro:6.80,Liberty:6.50
CU|CUB|Cuba|North America|Cubacel:20.00|nodata
CW|CUW|Curaçao|North America|Flow:12.00,Digicel:11.50
DM|DMA|Dominica|North America|Flow:16.00,Digicel:15.50
DO|DOM|Dominican Republic|North America|Claro:7.00,Altice:6.80,Viva:7.50
SV|SLV|El Salvador|North America|Claro:7.50,Tigo:7.30,Movistar:7.60,Digicel:7.00
GL|GRL|Greenland|North America|Tusass:20.00
GD|GRD|Grenada|North America|Flow:15.00,Digicel:14.50
GP|GLP|Guadeloupe|North America|Orange:8.00,SFR Caraïbe:7.80,Digicel:7.50
GT|GTM|Guatemala|North America|Tigo:7.00,Claro:6.80
HT|HTI|Haiti|North America|Digicel:12.00,Natcom:11.50
HN|HND|Honduras|North America|Tigo:8.00,Claro:7.80
JM|JAM|Jamaica|North America|Digicel:9.00,Flow:8.80
MQ|MTQ|Martinique|North America|Orange:8.00,SFR Caraïbe:7.80,Digicel:7.50
MX|MEX|Mexico|North America|Telcel:6.00,AT&T:5.80,Movistar:5.50
MS|MSR|Montserrat|North America|Flow:18.00,Digicel:17.50
NI|NIC|Nicaragua|North America|Claro:8.50,Tigo:8.20
PA|PAN|Panama|North America|+Móvil:8.00,Tigo:7.80
PR|PRI|Puerto Rico|North America|Claro:6.00,T-Mobile:5.80,Liberty:5.90
KN|KNA|Saint Kitts and Nevis|North America|Flow:16.00,Digicel:15.50
LC|LCA|Saint Lucia|North America|Flow:15.00,Digicel:14.50
VC|VCT|Saint Vincent and the Grenadines|North America|Flow:15.50,Digicel:15.00
SX|SXM|Sint Maarten|North America|TelEm:14.00,Flow:13.50
TT|TTO|Trinidad and Tobago|North America|bmobile:10.00,Digicel:9.50
TC|TCA|Turks and Caicos Islands|North America|Flow:16.00,Digicel:15.50
US|USA|United States|North America|AT&T:5.00,T-Mobile:4.50,Verizon:5.50
VI|VIR|United States Virgin Islands|North America|Viya:12.00,Liberty:11.50
# South America
AR|ARG|Argentina|South America|Claro:6.50,Movistar:6.30,Personal:6.00
BO|BOL|Bolivia|South America|Entel:8.00,Tigo:7.80,Viva:7.50
BR|BRA|Brazil|South America|Vivo:6.00,Claro:5.80,TIM:5.50
CL|CHL|Chile|South America|Entel:5.50,Movistar:5.30,Claro:5.20,WOM:4.90
CO|COL|Colombia|South America|Claro:5.50,Movistar:5.30,Tigo:5.20,WOM:4.90
EC|ECU|Ecuador|South America|Claro:7.50,Movistar:7.30,CNT:7.00
FK|FLK|Falkland Islands|South America|Sure:25.00
GF|GUF|French Guiana|South America|Orange:9.00,SFR Caraïbe:8.80,Digicel:8.50
GY|GUY|Guyana|South America|GTT:12.00,Digicel:11.50
PY|PRY|Paraguay|South America|Tigo:7.00,Personal:6.80,Claro:6.50
PE|PER|Peru|South America|Claro:6.00,Movistar:6.20,Entel:5.80,Bitel:5.50
SR|SUR|Suriname|South America|Telesur:12.00,Digicel:11.50
UY|URY|Uruguay|South America|Antel:7.00,Movistar:6.80,Claro:6.50
VE|VEN|Venezuela|South America|Movilnet:14.00,Movistar:13.50,Digitel:13.80
# Oceania
AS|ASM|American Samoa|Oceania|Bluesky:18.00
AU|AUS|Australia|Oceania|Telstra:6.50,Optus:6.00,Vodafone:5.80
CK|COK|Cook Islands|Oceania|Vodafone:22.00
FJ|FJI|Fiji|Oceania|Vodafone:12.00,Digicel:11.50
PF|PYF|French Polynesia|Oceania|Vini:18.00,Vodafone:17.50
GU|GUM|Guam|Oceania|Docomo Pacific:10.00,IT&E:9.50,GTA:9.80
KI|KIR|Kiribati|Oceania|ATHKL:24.00
MH|MHL|Marshall Islands|Oceania|NTA:24.00
FM|FSM|Micronesia|Oceania|FSM Telecom:23.00
NR|NRU|Nauru|Oceania|Digicel:24.00
NC|NCL|New Caledonia|Oceania|Mobilis:16.00
NZ|NZL|New Zealand|Oceania|Spark:6.50,One NZ:6.30,2degrees:6.00
MP|MNP|Northern Mariana Islands|Oceania|Docomo Pacific:11.00,IT&E:10.50
PW|PLW|Palau|Oceania|PNCC:22.00,PT Waves:21.50
PG|PNG|Papua New Guinea|Oceania|Digicel:13.00,bmobile:12.50,Vodafone:12.00
WS|WSM|Samoa|Oceania|Digicel:16.00,Vodafone:15.50
SB|SLB|Solomon Islands|Oceania|Our Telekom:18.00,bmobile:17.50
TO|TON|Tonga|Oceania|Digicel:17.00,U-Call:16.50
TV|TUV|Tuvalu|Oceania|TTC:25.00
VU|VUT|Vanuatu|Oceania|Digicel:15.00,Vodafone:14.50
";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn table() -> &'static RateTable {
        RateTable::builtin()
    }

    fn names(found: &[&Country]) -> Vec<String> {
        found.iter().map(|c| c.iso2.clone()).collect()
    }

    #[test]
    fn builtin_table_parses_and_is_large_enough() {
        assert!(parse(RETAIL_TABLE).is_ok(), "{:?}", parse(RETAIL_TABLE).err());
        assert!(table().countries().len() >= 150, "only {} countries", table().countries().len());
    }

    #[test]
    fn codes_are_unique_and_well_formed() {
        let mut iso2 = BTreeSet::new();
        let mut iso3 = BTreeSet::new();
        let mut slugs = BTreeSet::new();
        for c in table().countries() {
            assert!(c.iso2.len() == 2 && c.iso2.bytes().all(|b| b.is_ascii_uppercase()), "{}", c.iso2);
            assert!(c.iso3.len() == 3 && c.iso3.bytes().all(|b| b.is_ascii_uppercase()), "{}", c.iso3);
            assert!(iso2.insert(c.iso2.clone()), "duplicate ISO2 {}", c.iso2);
            assert!(iso3.insert(c.iso3.clone()), "duplicate ISO3 {}", c.iso3);
            assert!(slugs.insert(c.slug.clone()), "duplicate slug {}", c.slug);
            assert!(CONTINENTS.contains(&c.continent.as_str()), "{}", c.continent);
            assert!(
                !c.slug.is_empty() && c.slug.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            );
            assert_eq!(c.flag.chars().count(), 2);
        }
        for continent in CONTINENTS {
            assert!(table().countries().iter().any(|c| c.continent == continent), "{continent} is empty");
        }
    }

    #[test]
    fn sorted_by_name() {
        let countries = table().countries();
        assert!(countries.windows(2).all(|w| w[0].slug < w[1].slug));
        assert_eq!(countries[0].name, "Afghanistan");
    }

    #[test]
    fn a_handful_have_no_data() {
        let none: Vec<&str> = table().countries().iter().filter(|c| !c.has_data).map(|c| c.iso2.as_str()).collect();
        assert!((3..=6).contains(&none.len()), "{none:?}");
        assert!(table().countries().iter().filter(|c| !c.has_data).all(|c| !c.networks.is_empty()));
        assert!(table().by_iso2("DE").unwrap().has_data);
    }

    #[test]
    fn prices_are_exactly_ten_percent_below_retail() {
        let nine_tenths = Decimal::new(9, 1);
        let thousand = Decimal::from(MB_PER_GB);
        for c in table().countries() {
            assert!((1..=4).contains(&c.networks.len()), "{}", c.name);
            for n in &c.networks {
                assert_eq!(n.per_gb_usd, n.retail_per_gb_usd * nine_tenths, "{} {}", c.name, n.operator);
                assert_eq!(n.per_mb_usd * thousand, n.per_gb_usd, "{} {}", c.name, n.operator);
                assert!(n.retail_per_gb_usd >= Decimal::new(2, 0) && n.retail_per_gb_usd <= Decimal::new(25, 0));
                for d in [n.per_gb_usd, n.per_mb_usd, n.retail_per_gb_usd] {
                    assert_eq!(d.to_string(), d.normalize().to_string(), "not normalized: {d}");
                }
            }
        }
        let o2 = table().network("de", Some("o2")).unwrap();
        assert_eq!(o2.retail_per_gb_usd, Decimal::new(480, 2));
        assert_eq!(o2.per_gb_usd, Decimal::new(432, 2));
        assert_eq!(o2.per_mb_usd, Decimal::new(432, 5));
    }

    #[test]
    fn cheapest_is_the_minimum() {
        for c in table().countries() {
            let min = c.networks.iter().map(|n| n.per_gb_usd).min().unwrap();
            assert_eq!(c.cheapest_per_gb_usd, min, "{}", c.name);
            let best = c.networks.iter().filter(|n| n.per_gb_usd == min).map(|n| n.operator.as_str()).min().unwrap();
            assert_eq!(c.cheapest_operator, best, "{}", c.name);
        }
        let de = table().by_iso2("de").unwrap();
        assert_eq!((de.cheapest_operator.as_str(), de.cheapest_per_gb_usd), ("O2", Decimal::new(432, 2)));
    }

    #[test]
    fn cheapest_ties_break_by_operator_name() {
        let t = parse("XA|XAA|Testland|Europe|Zeta:5.00,Alpha:5.00,Mid:6.00").unwrap();
        assert_eq!(t.countries()[0].cheapest_operator, "Alpha");
        assert_eq!(t.countries()[0].cheapest_per_gb_usd, Decimal::new(45, 1));
    }

    #[test]
    fn malformed_lines_are_rejected() {
        for bad in [
            "DE|DEU|Germany|Europe",
            "de|DEU|Germany|Europe|A:5.00",
            "DE|DE|Germany|Europe|A:5.00",
            "DE|DEU|Germany|Atlantis|A:5.00",
            "DE|DEU|Germany|Europe|A:5.0",
            "DE|DEU|Germany|Europe|A:5",
            "DE|DEU|Germany|Europe|A:0.00",
            "DE|DEU|Germany|Europe|A:-1.00",
            "DE|DEU|Germany|Europe|:5.00",
            "DE|DEU|Germany|Europe|A:5.00,a:4.00",
            "DE|DEU|Germany|Europe|A:5.00,B:5.00,C:5.00,D:5.00,E:5.00",
            "DE|DEU|Germany|Europe|A:5.00|maybe",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn filter_by_country_code_slug_and_name() {
        let t = table();
        for q in ["de", "DE", " De ", "deu", "DEU", "germany", "Germany", "GERMANY", "  germany\t"] {
            assert_eq!(names(&t.filter(Some(q), None)), ["DE"], "{q:?}");
        }
        assert_eq!(names(&t.filter(Some("united-states"), None)), ["US"]);
        assert_eq!(names(&t.filter(Some("United States"), None)), ["US"]);
        assert_eq!(names(&t.filter(Some("cote-d-ivoire"), None)), ["CI"]);
        assert_eq!(names(&t.filter(Some("Côte d'Ivoire"), None)), ["CI"]);
        assert_eq!(names(&t.filter(Some("sao-tome-and-principe"), None)), ["ST"]);
        assert_eq!(names(&t.filter(Some("guinea-bissau"), None)), ["GW"]);
        assert_eq!(names(&t.filter(Some("DE"), Some("europe"))), ["DE"]);
        assert!(t.filter(Some("DE"), Some("Asia")).is_empty());
    }

    #[test]
    fn filter_by_continent_name_and_slug() {
        let t = table();
        let na = t.filter(None, Some("North America"));
        assert!(na.len() > 20 && na.iter().all(|c| c.continent == "North America"));
        assert_eq!(names(&t.filter(None, Some("north-america"))), names(&na));
        assert_eq!(names(&t.filter(None, Some("NORTH AMERICA"))), names(&na));
        assert_eq!(names(&t.filter(None, Some(" North-America "))), names(&na));
        let sa = t.filter(None, Some("south-america"));
        assert!(!sa.is_empty() && sa.iter().all(|c| c.continent == "South America"));
        assert!(t.filter(None, Some("europe")).iter().any(|c| c.iso2 == "DE"));
        assert_eq!(t.filter(None, None).len(), t.countries().len());
    }

    #[test]
    fn unknown_filters_give_nothing() {
        let t = table();
        assert!(t.filter(Some("XX"), None).is_empty());
        assert!(t.filter(Some("atlantis"), None).is_empty());
        assert!(t.filter(Some(""), None).is_empty());
        assert!(t.filter(None, Some("Antarctica")).is_empty());
        assert!(t.filter(None, Some("america")).is_empty());
    }

    #[test]
    fn lookups() {
        let t = table();
        assert_eq!(t.by_iso2("de").unwrap().name, "Germany");
        assert_eq!(t.by_iso2("US").unwrap().iso3, "USA");
        assert!(t.by_iso2("XX").is_none());
        assert!(t.by_iso2("DEU").is_none());
        assert_eq!(t.network("DE", None).unwrap().operator, "O2");
        assert_eq!(t.network("de", Some("VODAFONE")).unwrap().per_gb_usd, Decimal::new(495, 2));
        assert_eq!(t.network("BA", Some("m:tel")).unwrap().operator, "m:tel");
        assert!(t.network("DE", Some("Verizon")).is_none());
        assert!(t.network("DE", Some("O")).is_none());
        assert!(t.network("XX", None).is_none());
    }

    #[test]
    fn flags_come_from_iso2() {
        assert_eq!(table().by_iso2("DE").unwrap().flag, "🇩🇪");
        assert_eq!(table().by_iso2("US").unwrap().flag, "🇺🇸");
        assert_eq!(table().by_iso2("CI").unwrap().flag, "\u{1F1E8}\u{1F1EE}");
    }

    #[test]
    fn slugs() {
        assert_eq!(slugify("United States"), "united-states");
        assert_eq!(slugify("Côte d'Ivoire"), "cote-d-ivoire");
        assert_eq!(slugify("  Timor--Leste! "), "timor-leste");
        assert_eq!(table().by_iso2("RE").unwrap().slug, "reunion");
        assert_eq!(table().by_iso2("CW").unwrap().slug, "curacao");
    }

    #[test]
    fn json_has_exactly_the_spec_fields() {
        let de = table().by_iso2("DE").unwrap();
        let value = serde_json::to_value(de).unwrap();
        let keys: BTreeSet<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        let expected: BTreeSet<&str> = [
            "name",
            "iso2",
            "iso3",
            "flag",
            "continent",
            "has_data",
            "cheapest_per_gb_usd",
            "cheapest_operator",
            "networks",
        ]
        .into_iter()
        .collect();
        assert_eq!(keys, expected);
        for network in value["networks"].as_array().unwrap() {
            let keys: BTreeSet<&str> = network.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys, ["operator", "per_mb_usd", "per_gb_usd"].into_iter().collect());
            assert!(network["per_gb_usd"].is_number() && network["per_mb_usd"].is_number());
        }
        assert!(value["cheapest_per_gb_usd"].is_number());
        assert_eq!(value["has_data"], serde_json::Value::Bool(true));

        let text = serde_json::to_string(de).unwrap();
        // Telekom: retail 5.00 -> 4.5 per GB, 0.0045 per MB; numbers, no trailing zeros.
        assert!(text.contains(r#"{"operator":"Telekom","per_mb_usd":0.0045,"per_gb_usd":4.5}"#), "{text}");
        assert!(text.contains(r#""cheapest_per_gb_usd":4.32,"cheapest_operator":"O2""#), "{text}");
        assert!(text.contains(r#""flag":"🇩🇪""#), "{text}");
        assert!(!text.contains("slug") && !text.contains("retail"), "{text}");
    }
}
