//! Placeholder until the OpenAPI document lands.
pub fn document() -> String {
    "{}".to_string()
}
