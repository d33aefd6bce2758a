# The tests labelled `heavy`: the slowest of the suite (tens of seconds in the Release build, several times
# that under ASan and UBSan). Under ARACHNE_TEST_REDUCED=1 (scripts/test.sh --sanitize) each runs on reduced
# sizes, as its comment says; none is skipped. `ctest -L heavy` runs them alone, `ctest -LE heavy` the rest.
# ctest reads this file after the GoogleTest tests are discovered (CMakeLists.txt, TEST_INCLUDE_FILES) and
# before the script tests are added: those (mpi.*, reliability.*) get the label in CMakeLists.txt. A name
# that no longer exists is ignored by ctest.
set_tests_properties(Calibration.SingleNodeTwoFoldOutOfSampleMape CliLearned.GenDataTrainAndPlanEndToEnd
  OracleLowerBound.NeverAboveTheSimulatedTimeOnRandomDensePlans
  PROPERTIES LABELS heavy)
