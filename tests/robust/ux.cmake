# The first hour of a new user (issue 29): the command line's version, unknown-command and error
# lines, the train flags reaching the run, eval's own options, plan's and estimate's wording, the
# kept learning-rate schedule on resume, and the report's time per activity (busy time, never
# above the step; no network on one rank).
tierzero_test(test_cli_ux
  SOURCES robust/test_cli_ux.cpp
  LIBS tz_train TIMEOUT 300)
add_dependencies(test_cli_ux tierzero)
tierzero_test(test_report_ux
  SOURCES robust/test_report_ux.cpp profile/synthetic_profile.cpp
  LIBS tz_profile TIMEOUT 60)
target_include_directories(test_report_ux PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/profile)
