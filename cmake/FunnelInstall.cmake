# Install and export: `find_package(funnel)` gives funnel::client (the client runtime,
# libcudart.so.13 with funnel/funnel.h) and funnel::mpi (the PMPI layer, which links
# funnel::client).  The programs go to bin/ beside lib/, where the client runtime looks
# for funnel-server.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(funnel_client PROPERTIES EXPORT_NAME client)
set_target_properties(funnel_client_core PROPERTIES EXPORT_NAME client_core)
set(funnel_export_targets funnel_client funnel_client_core)
if(TARGET funnel_mpi)
  # The installed hooks find funnel's libcudart.so.13 beside themselves, its libcuda.so.1 below.
  set_target_properties(funnel_mpi PROPERTIES INSTALL_RPATH "$ORIGIN:$ORIGIN/funnel-driver")
  list(APPEND funnel_export_targets funnel_mpi)
endif()
install(TARGETS ${funnel_export_targets} EXPORT funnelTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS funnel-server funnel-run funnelctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The client driver, libcuda.so.1, in a folder of its own below lib/ (funnel-run puts it first in
# a program's library path; its RUNPATH $ORIGIN/.. finds the client core; funnel::mpi needs it).
set_target_properties(funnel_driver PROPERTIES EXPORT_NAME driver)
install(TARGETS funnel_driver EXPORT funnelTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/funnel-driver NAMELINK_SKIP)
# Beside it, funnel's libnvidia-ml.so.1 (the NVML calls of Python frameworks, answered from it).
install(TARGETS funnel_nvml LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/funnel-driver NAMELINK_SKIP)
install(FILES ${PROJECT_SOURCE_DIR}/runtime/client/include/funnel/funnel.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/funnel)

set(funnel_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/funnel)
install(EXPORT funnelTargets NAMESPACE funnel:: DESTINATION ${funnel_cmake_dir})
# The build tree is a package too (find_package(funnel) with funnel_DIR=<build>).
export(EXPORT funnelTargets NAMESPACE funnel:: FILE ${PROJECT_BINARY_DIR}/funnelTargets.cmake)
if(TARGET funnel_mpi)
  set(FUNNEL_PACKAGE_HAS_MPI ON)
else()
  set(FUNNEL_PACKAGE_HAS_MPI OFF)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/funnelConfig.cmake.in
  ${PROJECT_BINARY_DIR}/funnelConfig.cmake INSTALL_DESTINATION ${funnel_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/funnelConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/funnelConfig.cmake ${PROJECT_BINARY_DIR}/funnelConfigVersion.cmake
  DESTINATION ${funnel_cmake_dir})
