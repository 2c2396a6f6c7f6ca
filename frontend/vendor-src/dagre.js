// dagre, the DAG layout (chosen over elkjs by measurement: see frontend/README in the report).
import dagre from "@dagrejs/dagre";
export default dagre;
export const { graphlib, layout } = dagre;
