# Included by the top-level CMakeLists.txt after trident_model and
# trident_core are defined.
#
# Under -DTD_SANITIZE=ON every executable that links trident_model (directly,
# or through trident_core: trident itself and every test) carries its
# sanitizer runtime options and the suppressions Open MPI needs, compiled in
# (runtime_defaults.c.in), so
# `ctest` in a sanitizer build needs nothing else, nor does a test added
# with a plain add_test, nor `mpirun build-asan/trident ...` by hand.
# Nothing is set in the environment, so child processes (mpirun, bash,
# /usr/bin/python3 with torch) run as they always do. ASAN_OPTIONS,
# LSAN_OPTIONS or UBSAN_OPTIONS given by hand still add to or override
# these defaults.

if(TD_SANITIZE)
  # The suppressions: lsan.supp, its comments stripped, as one C string.
  set(_supp_file ${CMAKE_SOURCE_DIR}/tests/sanitize/lsan.supp)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_supp_file})
  file(STRINGS ${_supp_file} _supp REGEX "^[a-z_]+:")
  list(JOIN _supp "\\n" TD_LSAN_SUPPRESSIONS)
  configure_file(${CMAKE_SOURCE_DIR}/tests/sanitize/runtime_defaults.c.in
                 ${CMAKE_BINARY_DIR}/td_sanitize_defaults.c @ONLY)
  # INTERFACE: compiled into each executable that links trident_model or
  # trident_core (which links trident_model). (In
  # the static library the object would never be pulled in: nothing in the
  # program refers to these functions; the sanitizer runtime looks them up.)
  target_sources(trident_model INTERFACE ${CMAKE_BINARY_DIR}/td_sanitize_defaults.c)
endif()

# Sanitized code runs about 2-3x slower: test time limits (TIMEOUT; never a
# tolerance) are multiplied by this factor.
if(TD_SANITIZE)
  set(TD_TIMEOUT_SCALE 3)
else()
  set(TD_TIMEOUT_SCALE 1)
endif()

# td_timeout(seconds test...): TIMEOUT, scaled under the sanitizers.
function(td_timeout s)
  math(EXPR t "${s} * ${TD_TIMEOUT_SCALE}")
  set_tests_properties(${ARGN} PROPERTIES TIMEOUT ${t})
endfunction()
