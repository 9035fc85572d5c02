# cmake -DSOURCE_DIR=... -DOUTPUT=... -P ZtGitCommit.cmake: writes OUTPUT, a header defining
# ZT_GIT_COMMIT as the source tree's commit ("-dirty" appended when tracked files differ from it),
# or, outside a git work tree, as the environment's ZT_GIT_COMMIT (a build from an exported
# tree), else "unknown". Run at every build (target zt_git_commit); the file is rewritten only
# when the text changes, so that an unchanged commit recompiles nothing.
set(commit "")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse HEAD
                  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0)
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
    if(rc EQUAL 0 AND NOT changes STREQUAL "")
      string(APPEND commit "-dirty")
    endif()
  else()
    set(commit "")
  endif()
endif()
if(commit STREQUAL "" AND DEFINED ENV{ZT_GIT_COMMIT})
  set(commit "$ENV{ZT_GIT_COMMIT}")
endif()
if(commit STREQUAL "" OR NOT commit MATCHES "^[0-9A-Za-z._+-]+$")
  set(commit "unknown")
endif()
set(text "// Written by share/cmake/ZtGitCommit.cmake at build time.\n#define ZT_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
