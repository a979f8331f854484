# Run by `cmake --install` and by CPack (install(SCRIPT)): installs the systemd units of docs/ops/
# into <prefix>/lib/systemd/system with ExecStart naming <prefix>/bin/outbox, the prefix known
# only now (/usr in the Debian package, PREFIX for `make install`). Written to the build tree
# first, then installed with file(INSTALL), which honours DESTDIR and records them in
# install_manifest.txt.
foreach(unit outbox-relay outbox-admin outbox-consume@)
  file(READ "${OUTBOX_SOURCE_DIR}/docs/ops/${unit}.service" text)
  string(REPLACE "/usr/local/bin/outbox" "${CMAKE_INSTALL_PREFIX}/bin/outbox" text "${text}")
  file(WRITE "${OUTBOX_BINARY_DIR}/units/${unit}.service" "${text}")
  file(INSTALL "${OUTBOX_BINARY_DIR}/units/${unit}.service"
       DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
endforeach()
