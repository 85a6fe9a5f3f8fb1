# uroced itself: the engine, the port, the control server and the verbs service in one binary.
add_library(uroce_emulator_options STATIC ${CMAKE_CURRENT_SOURCE_DIR}/daemon/options.cpp)
target_link_libraries(uroce_emulator_options PUBLIC uroce_emulator_port CLI11::CLI11 spdlog::spdlog uroce_wire)
add_executable(uroced ${CMAKE_CURRENT_SOURCE_DIR}/uroced.cpp)
target_link_libraries(uroced PRIVATE uroce_emulator_options uroce_emulator_engine uroce_emulator_service
                      uroce_emulator_control Threads::Threads)
