# The web UI (web/**) and Chart.js (Debian's libjs-chart.js) compiled into
# brioche_server as byte arrays, so `brioche serve` needs no files and no
# network at run time (src/server/web_assets.h). `--web-dir` still serves a
# folder from disk instead, for development.
#
# Included from the top-level CMakeLists.txt after brioche_server exists.

# Chart.js: the UMD build (sets window.Chart), from the Debian package or a
# file named on the command line (-DBRIOCHE_CHART_JS=/path/chart.umd.js).
find_file(BRIOCHE_CHART_JS NAMES chart.min.js chart.umd.js chart.js
          PATHS /usr/share/javascript/chart.js /usr/share/nodejs/chart.js/dist /usr/share/nodejs/chart.js
          NO_DEFAULT_PATH
          DOC "Chart.js UMD build embedded in the web UI (Debian: libjs-chart.js)")
if(NOT BRIOCHE_CHART_JS OR NOT EXISTS "${BRIOCHE_CHART_JS}")
  message(FATAL_ERROR
    "Chart.js not found: the web UI embeds it at build time and fetches nothing at run time.\n"
    "Looked for chart.min.js / chart.umd.js / chart.js in /usr/share/javascript/chart.js and /usr/share/nodejs/chart.js (BRIOCHE_CHART_JS: ${BRIOCHE_CHART_JS}).\n"
    "Install it with `apt-get install libjs-chart.js` (scripts/setup.sh does), or pass -DBRIOCHE_CHART_JS=/path/to/chart.umd.js.")
endif()

file(GLOB_RECURSE brioche_web_files CONFIGURE_DEPENDS RELATIVE ${CMAKE_SOURCE_DIR}/web ${CMAKE_SOURCE_DIR}/web/*)
list(SORT brioche_web_files)
set(brioche_web_manifest "")
set(brioche_web_inputs "")
foreach(rel ${brioche_web_files})
  string(APPEND brioche_web_manifest "/${rel}=${CMAKE_SOURCE_DIR}/web/${rel}\n")
  list(APPEND brioche_web_inputs ${CMAKE_SOURCE_DIR}/web/${rel})
endforeach()
string(APPEND brioche_web_manifest "/lib/chart.umd.js=${BRIOCHE_CHART_JS}\n")
list(APPEND brioche_web_inputs ${BRIOCHE_CHART_JS})

set(brioche_web_dir ${CMAKE_BINARY_DIR}/generated/web)
file(MAKE_DIRECTORY ${brioche_web_dir})
# Written only when it changes, so an unchanged list does not rebuild.
file(CONFIGURE OUTPUT ${brioche_web_dir}/manifest.txt CONTENT "${brioche_web_manifest}")
add_custom_command(
  OUTPUT ${brioche_web_dir}/web_assets_data.cpp
  COMMAND ${CMAKE_COMMAND} -DMANIFEST=${brioche_web_dir}/manifest.txt -DOUTPUT=${brioche_web_dir}/web_assets_data.cpp
          -P ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
  DEPENDS ${brioche_web_inputs} ${brioche_web_dir}/manifest.txt ${CMAKE_SOURCE_DIR}/cmake/embed_files.cmake
  COMMENT "Embedding the web UI and Chart.js"
  VERBATIM)
target_sources(brioche_server PRIVATE ${brioche_web_dir}/web_assets_data.cpp)
