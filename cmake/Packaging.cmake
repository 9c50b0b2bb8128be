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
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libqt6sql6-sqlite, libqt6svg6")
# The default data set and the font reports draw their text with.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "dataset-fashion-mnist, fonts-dejavu-core")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "openssh-client")
# Installed binaries carry no build-tree RPATH: CMAKE_INSTALL_RPATH is empty,
# so install strips it; LibTorch and Qt live in the system library directories.
include(CPack)
