# Run by `cmake --install` and by CPack (install(SCRIPT)): writes the systemd units of
# docs/ops/ into <prefix>/lib/systemd/system with ExecStart naming <prefix>/bin/outbox, the
# prefix known only now (/usr in the Debian package, PREFIX for `make install`).
foreach(unit outbox-relay outbox-admin)
  file(READ "${OUTBOX_SOURCE_DIR}/docs/ops/${unit}.service" text)
  string(REPLACE "/usr/local/bin/outbox" "${CMAKE_INSTALL_PREFIX}/bin/outbox" text "${text}")
  set(target "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/systemd/system/${unit}.service")
  message(STATUS "Installing: ${target}")
  file(WRITE "${target}" "${text}")
endforeach()
