# data/ifeval/ compiled into brioche_eval (src/eval/embedded_data.cpp reads
# the files with the assembler's .incbin): the IFEval prompts, the English
# Punkt model and langdetect's profiles. A changed file rebuilds the object.
set(BRIOCHE_EVAL_DATA_DIR ${CMAKE_SOURCE_DIR}/data/ifeval)
target_compile_definitions(brioche_eval PRIVATE BRIOCHE_EVAL_DATA_DIR="${BRIOCHE_EVAL_DATA_DIR}")
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/eval/embedded_data.cpp PROPERTIES OBJECT_DEPENDS
  "${BRIOCHE_EVAL_DATA_DIR}/input_data.jsonl;${BRIOCHE_EVAL_DATA_DIR}/punkt_english.txt;${BRIOCHE_EVAL_DATA_DIR}/langdetect_profiles.txt.zst")
