# One Debian package with dlion-studio, dlion and dlion-agent (`cpack -G DEB`
# in the build directory). Installed side by side in /usr/bin, so dlion finds
# dlion-agent next to itself (LocalCluster::agentProgram).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dlion-studio)
set(CPACK_PACKAGE_VENDOR "DLion")
set(CPACK_PACKAGE_CONTACT "DLion Studio maintainers <dlion@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Decentralized deep learning training control center")
set(CPACK_PACKAGE_DESCRIPTION
  "DLion Studio sets up a micro-cloud of training agents, trains a model across it\n\
with adaptive strategies and records every run. Contains the dlion-studio GUI,\n\
the dlion command line and the dlion-agent node program.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# RelWithDebInfo binaries: ship them without debug info (32 MB -> a few MB).
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# Library dependencies (Qt 6, LibTorch, libssh, QCustomPlot, ...) come from
# dpkg-shlibdeps on the installed binaries; the Qt plugins they load at run
# time are not linked, so they are listed here.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Installed binaries carry no build-tree RPATH: CMAKE_INSTALL_RPATH is empty,
# so install strips it; LibTorch and Qt live in the system library directories.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libqt6sql6-sqlite, libqt6svg6")
# The default data set, the font reports draw their text with, and a BLAS
# that trains 1.45x faster than the reference one libtorch pulls in.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, fonts-dejavu-core, libopenblas0-pthread")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "openssh-client")

# Manual pages (section 1), one per program and dlion command, from --help.
set(DLION_MAN_PAGES)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/man)
foreach(page dlion dlion-agent dlion-studio dlion-run dlion-attach dlion-deploy dlion-stop dlion-knobs dlion-runs
             dlion-report dlion-compare dlion-tag dlion-note)
  string(REGEX MATCH "^dlion(-agent|-studio)?" program ${page})
  string(REGEX REPLACE "^dlion-?(agent|studio)?-?" "" command ${page})
  # Without the GUI there is no dlion-studio, and dlion has no report or compare.
  if(NOT TARGET ${program} OR (NOT DLION_BUILD_GUI AND command MATCHES "^(report|compare)$"))
    continue()
  endif()
  set(out ${CMAKE_BINARY_DIR}/man/${page}.1)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/man_page.sh $<TARGET_FILE:${program}> "${command}" ${page} ${PROJECT_VERSION} ${out}
    DEPENDS ${program} ${CMAKE_CURRENT_LIST_DIR}/man_page.sh VERBATIM)
  list(APPEND DLION_MAN_PAGES ${out})
endforeach()
add_custom_target(man_pages ALL DEPENDS ${DLION_MAN_PAGES})
install(FILES ${DLION_MAN_PAGES} DESTINATION share/man/man1)
include(CPack)
