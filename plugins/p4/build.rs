fn main() {
    sluice_api_schema::rust::build(&["api/p4.api"]);
}
