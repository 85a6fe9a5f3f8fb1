# uroced itself: the engine, the port, the control server and the verbs service in one binary, built twice
# (emulator/dpdk.cmake): `uroced` with its drivers linked in, and `uroced-all-pmds` on Debian's shared DPDK
# with every driver it ships, which uroced runs instead when a port needs an mlx4/mlx5 driver.
add_library(uroce_emulator_options STATIC ${CMAKE_CURRENT_SOURCE_DIR}/daemon/options.cpp)
target_link_libraries(uroce_emulator_options PUBLIC uroce_emulator_port uroce_emulator_net CLI11::CLI11 spdlog::spdlog uroce_wire)
foreach(flavour static shared)
  if(flavour STREQUAL "static")
    set(daemon uroced)
  else()
    set(daemon uroced-all-pmds)
  endif()
  add_executable(${daemon} ${CMAKE_CURRENT_SOURCE_DIR}/uroced.cpp)
  target_link_libraries(${daemon} PRIVATE uroce_emulator_options uroce_emulator_engine uroce_emulator_service
                        uroce_emulator_control Threads::Threads uroce_dpdk_${flavour})
endforeach()
target_compile_definitions(uroced-all-pmds PRIVATE UROCED_ALL_PMDS=1)
