"""Generated stubs of the railfabric.v1 API (proto/railfabric/v1/*.proto); `make proto` rewrites
every module here except this one."""
