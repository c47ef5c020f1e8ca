fn main() {
    sluice_api_schema::rust::build(&["api/tap.api"]);
}
