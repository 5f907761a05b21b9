# data/ifeval/ compiled into brioche_eval (src/eval/embedded_data.cpp reads
# the files with the assembler's .incbin): the IFEval prompts, the English
# Punkt model and langdetect's profiles. A changed file rebuilds the object.
set(BRIOCHE_EVAL_DATA_DIR ${CMAKE_SOURCE_DIR}/data/ifeval)
set(BRIOCHE_EVAL_DATA_FILES
  ${BRIOCHE_EVAL_DATA_DIR}/input_data.jsonl
  ${BRIOCHE_EVAL_DATA_DIR}/punkt_english.txt
  ${BRIOCHE_EVAL_DATA_DIR}/langdetect_profiles.txt.zst)
# ccache does not see files read by .incbin: the files' hash goes on the
# object's command line, so new data is never served from the cache (and
# editing a file re-runs the configure step that computes it).
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${BRIOCHE_EVAL_DATA_FILES})
set(BRIOCHE_EVAL_DATA_HASH "")
foreach(file ${BRIOCHE_EVAL_DATA_FILES})
  file(SHA256 ${file} file_hash)
  string(APPEND BRIOCHE_EVAL_DATA_HASH ${file_hash})
endforeach()
string(SHA256 BRIOCHE_EVAL_DATA_HASH "${BRIOCHE_EVAL_DATA_HASH}")
target_compile_definitions(brioche_eval PRIVATE BRIOCHE_EVAL_DATA_DIR="${BRIOCHE_EVAL_DATA_DIR}")
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/eval/embedded_data.cpp PROPERTIES
  OBJECT_DEPENDS "${BRIOCHE_EVAL_DATA_FILES}"
  COMPILE_DEFINITIONS "BRIOCHE_EVAL_DATA_HASH=\"${BRIOCHE_EVAL_DATA_HASH}\"")
